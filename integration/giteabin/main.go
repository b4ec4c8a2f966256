// Command giteabin is Gitea v1.26.0 built from its Go module, for the
// integration tests and `make demo`. It lives in its own nested module so the
// sidecar's go.mod does not carry Gitea's dependency tree.
package main

import (
	"os"
	"runtime"
	"time"

	"code.gitea.io/gitea/cmd"
	"code.gitea.io/gitea/modules/log"
	"code.gitea.io/gitea/modules/setting"

	// Register the markup renderers Gitea's own main registers.
	_ "code.gitea.io/gitea/modules/markup/asciicast"
	_ "code.gitea.io/gitea/modules/markup/console"
	_ "code.gitea.io/gitea/modules/markup/csv"
	_ "code.gitea.io/gitea/modules/markup/markdown"
	_ "code.gitea.io/gitea/modules/markup/orgmode"

	"github.com/urfave/cli/v3"
)

// version must be a release number: the SDK refuses a server that says "dev".
const version = "1.26.0"

func main() {
	setting.AppVer = version
	setting.AppBuiltWith = " built with " + runtime.Version() + " : sqlite, sqlite_unlock_notify"
	setting.AppStartTime = time.Now().UTC()
	cli.OsExiter = func(code int) {
		log.GetManager().Close()
		os.Exit(code)
	}
	app := cmd.NewMainApp(cmd.AppVersion{Version: version, Extra: setting.AppBuiltWith})
	_ = cmd.RunMainApp(app, os.Args...)
	log.GetManager().Close()
}
