package stack

import (
	"time"

	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/awsfn"
	"github.com/openatf/atf/shared/registry"
)

// The status function's settings: every call is one or two conditional writes.
const (
	statusTimeout  = 10 * time.Second
	statusMemoryMB = 256
)

// status is the status function of one lambda of kind function (functions/status): the
// heartbeat and status controller that the lambda's worker function invokes to claim tasks,
// heartbeat and report results. Each such lambda has its own, so that IAM keeps teams apart:
//   - only the lambda's worker may invoke it (worker.go grants no other function);
//   - it serves ATF_LAMBDA's tasks and refuses requests naming another lambda;
//   - its role reads and moves only that lambda's items (store.grantLambda), and nothing else.
//
// So one lambda's worker cannot claim (and read the payload of), report or release another
// lambda's tasks. One function per lambda costs nothing per call: each call is the same one
// invocation it was with a shared function.
type status struct {
	*function
}

func newStatus(scope constructs.Construct, id string, d *deployment, e registry.Entry, s *store) *status {
	env := d.commonEnv(d.ownLambdaJSON(e.Name), s.table.TableName())
	env[awsfn.EnvLambda] = jsii.String(e.Name)
	st := &status{newFunction(scope, id, d, functionProps{
		asset: "status", description: "atf-" + d.name + ": claims, heartbeats and results of the tasks of lambda " + e.Name,
		timeout: statusTimeout, memoryMB: statusMemoryMB, env: env,
	})}
	s.grantLambda(st.role, e.Name, statusActions...)
	return st
}
