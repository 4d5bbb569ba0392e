package stack

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/registry"
)

// worker is the worker function of a lambda of kind function: its Go handler
// (functions/workers/<handler>, run by workerfn.Main) fed by one SQS event source per priority.
//
// Each event source reports batch item failures (sqsworker answers with the records that must
// come back), sends at most the registry's batch_size records, which is at most the lambda's
// concurrency, and keeps at most max_concurrency of that priority's invocations running: giving
// higher priorities more is how worker functions favour them. The function's timeout is the
// lambda's plus sqsworker.DefaultMargin.
//
// Its role receives from, deletes in and changes the visibility of messages in its own queues
// (the event sources' grant; sqsworker shortens the visibility of a record failed for a transient
// reason), and invokes its lambda's own status function, and nothing else: no other lambda's
// queues or status function, no table.
type worker struct {
	*function
}

func newWorker(scope constructs.Construct, id string, d *deployment, e registry.Entry, q *queues, st *status) *worker {
	env := d.commonEnv(d.ownLambdaJSON(e.Name), jsii.String(d.prefix))
	// The worker never touches the table, but awsfn reads ATF_TABLE in every function.
	// It claims through its own lambda's status function, the one it may invoke.
	env[awsfn.EnvLambda] = jsii.String(e.Name)
	env[awsfn.EnvStatusFunction] = st.function.function.FunctionName()
	w := &worker{newFunction(scope, id, d, functionProps{
		asset: "workers-" + e.Handler, description: "atf-" + d.name + ": runs the tasks of lambda " + e.Name,
		timeout: workerTimeout(e), memoryMB: e.Function.MemoryMB, env: env,
	})}
	for _, p := range e.Priorities {
		w.function.function.AddEventSource(awslambdaeventsources.NewSqsEventSource(q.queue[p], &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(float64(e.Function.BatchSize)),
			ReportBatchItemFailures: jsii.Bool(true),
			MaxConcurrency:          jsii.Number(float64(e.Function.MaxConcurrency[p])),
		}))
	}
	st.function.function.GrantInvoke(w.role)
	suppress(w.role, "AwsSolutions-IAM5", "The wildcard stands for the versions and aliases of the lambda's own status function, the one function its worker invokes.",
		`/^Resource::<Lambda`+logicalName(e.Name)+`StatusFunction[0-9A-F]{8}\.Arn>:\*$/`)
	return w
}

// logicalName is how CDK writes a construct id inside logical ids: its letters and digits.
func logicalName(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, id)
}
