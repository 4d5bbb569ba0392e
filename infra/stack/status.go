package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/registry"
)

// The status function's settings: every call is one or two conditional writes.
const (
	statusTimeout  = 10 * time.Second
	statusMemoryMB = 256
	// minStatusReserved is the least reserved concurrency of a status function.
	minStatusReserved = 2
)

// status is the status function of one lambda of kind function (functions/status): the
// heartbeat and status controller that the lambda's worker function invokes to claim tasks,
// heartbeat and report results. Each such lambda has its own, so that IAM keeps teams apart:
//   - only the lambda's worker may invoke it (worker.go grants no other function);
//   - it serves ATF_LAMBDA's tasks and refuses requests naming another lambda;
//   - its role reads and moves only that lambda's items (store.grantLambda), reads the gates, and
//     sends to that lambda's queues only.
//
// So one lambda's worker cannot claim (and read the payload of), report or release another
// lambda's tasks. One function per lambda costs nothing per call: each call is the same one
// invocation it was with a shared function.
//
// Where the environment reserves concurrency, its concurrency is reserved (statusReserved), so
// that worker invocations filling the account cannot throttle the lambda's claims and
// heartbeats; its throttles and errors are alarmed on (statusAlarms).
type status struct {
	*function
}

func newStatus(scope constructs.Construct, id string, d *deployment, e registry.Entry, s *store, q *queues) *status {
	env := d.writerEnv(d.ownLambdaJSON(e.Name), s.table.TableName())
	env[awsfn.EnvLambda] = jsii.String(e.Name)
	st := &status{newFunction(scope, id, d, functionProps{
		asset: "status", description: "atf-" + d.name + ": claims, heartbeats and results of the tasks of lambda " + e.Name,
		timeout: statusTimeout, memoryMB: statusMemoryMB, env: env,
		reserved: statusReserved(d.env, []registry.Entry{e}),
	})}
	s.grantLambda(st.role, e.Name, statusActions...)
	s.grantUpstreamReads(st.role)
	s.grantGateReads(st.role)
	// A retry due within 15 minutes, or a task handed back, goes back to its queue from here.
	for _, p := range q.priorities {
		q.queue[p].GrantSendMessages(st.role)
	}
	d.grantPublish(st.role)
	return st
}

// statusReserved is the reserved concurrency of a status function serving the worker functions
// of entries (one lambda's): none where the environment reserves nothing (ReservedConcurrency
// off); else the environment's StatusConcurrency, per status function, if set,
// else the most tasks those workers run
// at once (per priority, MaximumConcurrency invocations of BatchSize records each). An executor
// has at most one status call out at a time, so at that size the reservation itself never
// throttles a call. ECS executors run their status controller in-process and count for nothing.
func statusReserved(env Environment, entries []registry.Entry) int {
	if !env.ReservedConcurrency {
		return 0
	}
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

// statusAlarms adds the alarms of lambda's status function: any throttled invocation (its
// reservation is too small) and any failed one, each a claim, heartbeat or result that did not
// happen.
func statusAlarms(add func(id, description string, metric awscloudwatch.IMetric, threshold int), lambda string, st *status, cfg *Alarms) {
	opts := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: seconds(alarmPeriod)}
	add("StatusThrottles-"+lambda, "the status function of lambda "+lambda+" was throttled: claims and heartbeats failed; raise status_concurrency",
		st.function.function.MetricThrottles(opts), orOne(cfg.StatusThrottles))
	add("StatusErrors-"+lambda, "the status function of lambda "+lambda+" failed: claims, heartbeats or results failed",
		st.function.function.MetricErrors(opts), orOne(cfg.StatusErrors))
}
