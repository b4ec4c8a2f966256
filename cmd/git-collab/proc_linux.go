package main

import "syscall"

// dieWithParent has the kernel kill a child of git-collab the moment
// git-collab dies, however it dies (SIGKILL, a crash). A session's ssh
// would otherwise read EOF on its stdin and end the session cleanly,
// releasing its claims at once while the command of git collab run,
// which nobody stops now, works on: another agent could take the issue
// over under it. With ssh killed, the connection drops instead, so the
// claims end a grace later, as for any agent that dies (session_lost);
// with the command's process group leader killed, the work stops (what
// it started in the background, which no signal from a dead parent can
// reach, has that grace to end). The kernel ties this to the thread that
// started the child, and Go ends a thread only when a goroutine locked to
// it exits, which nothing in git-collab does.
func dieWithParent(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
