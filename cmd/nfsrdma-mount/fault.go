package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/faulty"
)

// The fault hook, for tests only: a mount server started with
// NFSRDMA_FAULT_INJECT=1 in its environment opens its RDMA fabric through
// verbs/faulty and takes "fault ACTION" on its control socket, so that a
// test can break the mount's connection from inside the client:
//
//	nfsrdma-mount fault break-qps /mnt   every QP of the mount to the error state
//	nfsrdma-mount fault fail-send /mnt   the next post of a SEND fails (waits for it, a minute at most)
//
// Without the variable the server has no decorator and answers "fault" as
// an unknown command; the socket is its user's alone (mode 0600) either
// way. The command is not in the usage text: it is no user's business.

// faultInjectEnv names the variable that enables the hook.
const faultInjectEnv = "NFSRDMA_FAULT_INJECT"

const cmdFault = "fault"

// faultInjection reports whether this server takes faults.
func faultInjection() bool { return os.Getenv(faultInjectEnv) == "1" }

// failSendWait bounds how long "fail-send" waits for a SEND to fail.
var failSendWait = time.Minute

// injectFault carries out a "fault ACTION" of the control socket and
// returns the answer: "ok: ..." or "error: ...".
func (m *mountServer) injectFault(action string) string {
	return injectInto(m.faults, action)
}

func injectInto(f *faulty.Fabric, action string) string {
	if f == nil {
		return "error: fault injection is not enabled\n"
	}
	switch action {
	case "break-qps":
		n, err := f.BreakQPs()
		if err == nil && n == 0 {
			err = fmt.Errorf("no live QP to break")
		}
		if err != nil {
			return fmt.Sprintf("error: %v\n", err)
		}
		return fmt.Sprintf("ok: %d QPs moved to the error state\n", n)
	case "fail-send":
		select {
		case <-f.FailPostSend(faulty.HasOpcode(verbs.OpSend)):
			return "ok: a SEND post failed\n"
		case <-time.After(failSendWait):
			f.Disarm()
			return fmt.Sprintf("error: no SEND posted within %v\n", failSendWait)
		}
	case "stats":
		s := f.Stats()
		return fmt.Sprintf("ok: qps %d live %d broken %d posts %d failed %d\n", s.QPs, f.LiveQPs(), s.QPsBroken, s.Posts, s.PostsFailed)
	}
	return fmt.Sprintf("error: unknown fault %q (break-qps, fail-send, stats)\n", action)
}

// faultCommand is "nfsrdma-mount fault ACTION DIR": it asks dir's server.
func faultCommand(name string, inv *invocation, stdout, stderr io.Writer) int {
	reply, err := controlRequest(inv.dir, cmdFault+" "+inv.faultAction, failSendWait+10*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "%s: fault %s %s: %v\n", name, inv.faultAction, inv.dir, err)
		return exitMountErr
	}
	if !strings.HasPrefix(reply, "ok") {
		fmt.Fprintf(stderr, "%s: fault %s %s: %s\n", name, inv.faultAction, inv.dir, strings.TrimSpace(strings.TrimPrefix(reply, "error: ")))
		return exitMountErr
	}
	io.WriteString(stdout, reply)
	return exitOK
}
