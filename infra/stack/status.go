package stack

import (
	"time"

	"github.com/aws/constructs-go/constructs/v10"
)

// The status function's settings: every call is one or two conditional writes.
const (
	statusTimeout  = 10 * time.Second
	statusMemoryMB = 256
)

// status is the status function (functions/status): the heartbeat and status controller that
// worker functions invoke to claim tasks, heartbeat and report results. It reads and writes the
// table; nothing else.
type status struct {
	*function
}

func newStatus(scope constructs.Construct, id string, d *deployment, s *store) *status {
	env := d.commonEnv(d.lambdasJSON, s.table.TableName())
	st := &status{newFunction(scope, id, d, functionProps{
		asset: "status", description: "atf-" + d.name + ": claims, heartbeats and results of tasks",
		timeout: statusTimeout, memoryMB: statusMemoryMB, env: env,
	})}
	s.grant(st.role)
	return st
}
