#!/bin/sh
# Run once by the postgres image, on its first start (an empty data
# volume): two databases, each with an owner of its own. Gitea's is
# Gitea's; the sidecar's ledger lives in "collab" and never in Gitea's
# database. The passwords come from .env, through the compose file.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
	-v gitea_password="$GITEA_DB_PASSWORD" -v collab_password="$COLLAB_DB_PASSWORD" <<'SQL'
CREATE ROLE gitea LOGIN PASSWORD :'gitea_password';
CREATE DATABASE gitea OWNER gitea;
CREATE ROLE collab LOGIN PASSWORD :'collab_password';
CREATE DATABASE collab OWNER collab;
REVOKE ALL ON DATABASE gitea FROM PUBLIC;
REVOKE ALL ON DATABASE collab FROM PUBLIC;
SQL
