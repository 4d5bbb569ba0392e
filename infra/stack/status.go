package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/registry"
)

// The status function's settings: every call is one or two conditional writes.
const (
	statusTimeout  = 10 * time.Second
	statusMemoryMB = 256
	// minStatusReserved is the least reserved concurrency of a status function.
	minStatusReserved = 2
)

// status is the status function (functions/status): the heartbeat and status controller that
// worker functions invoke to claim tasks, heartbeat and report results. It reads and writes the
// table; nothing else.
//
// Its concurrency is reserved (statusReserved), so that worker invocations filling the account
// cannot throttle the claims and heartbeats of every lambda; its throttles and errors are alarmed
// on (statusAlarms).
type status struct {
	*function
}

func newStatus(scope constructs.Construct, id string, d *deployment, s *store) *status {
	env := d.commonEnv(d.lambdasJSON, s.table.TableName())
	st := &status{newFunction(scope, id, d, functionProps{
		asset: "status", description: "atf-" + d.name + ": claims, heartbeats and results of tasks",
		timeout: statusTimeout, memoryMB: statusMemoryMB, env: env,
		reserved: statusReserved(d.env, d.reg.Lambdas),
	})}
	s.grant(st.role)
	return st
}

// statusReserved is the reserved concurrency of a status function serving the worker functions
// of entries: the environment's StatusConcurrency if set, else the most tasks those workers run
// at once (per priority, MaximumConcurrency invocations of BatchSize records each). An executor
// has at most one status call out at a time, so at that size the reservation itself never
// throttles a call. ECS executors run their status controller in-process and count for nothing.
func statusReserved(env Environment, entries []registry.Entry) int {
	if env.StatusConcurrency > 0 {
		return env.StatusConcurrency
	}
	n := 0
	for _, e := range entries {
		if e.Kind != registry.KindFunction {
			continue
		}
		for _, p := range e.Priorities {
			n += e.Function.MaxConcurrency[p] * e.Function.BatchSize
		}
	}
	return max(n, minStatusReserved)
}

// statusAlarms adds the alarms of a status function: any throttled invocation (its reservation is
// too small) and any failed one, each a claim, heartbeat or result that did not happen.
func statusAlarms(add func(id, description string, metric awscloudwatch.IMetric, threshold int), id string, st *status, cfg *Alarms) {
	opts := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: seconds(alarmPeriod)}
	add(id+"Throttles", "the status function was throttled: claims and heartbeats failed; raise status_concurrency",
		st.function.function.MetricThrottles(opts), orOne(cfg.StatusThrottles))
	add(id+"Errors", "the status function failed: claims, heartbeats or results failed",
		st.function.function.MetricErrors(opts), orOne(cfg.StatusErrors))
}
