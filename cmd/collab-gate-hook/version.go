package main

// version names the build when the go command could not stamp it (see
// buildinfo.Read): set at link time, -ldflags "-X main.version=v1.2.3",
// as the Dockerfile and make build do.
var version string
