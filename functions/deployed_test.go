package functions_test

// End to end on what was deployed: the dev stacks (the core atf-dev and the lambda stacks
// atf-dev-*) deployed into moto (localstack/deploy-local), read back through the AWS API, and the function binaries run under the Lambda Runtime API
// harness as that deployment wires them: the names, environment, timeouts, event source mappings
// and rule are the deployed ones, never atf create's or written here. What feeds the functions
// stands in for the AWS services moto does not run:
//
//   - API Gateway: moto creates no HTTP API, so lambdaruntime.APIGateway turns the Go client's
//     requests into the proxy events (payload format 1.0) of the deployed integration, after
//     checking their SigV4 signatures as the routes' IAM authorization does (the environment's
//     credentials sign and are the known ones);
//   - the event source mappings: eventsource.SQS polls each mapping's queue with its batch size
//     and hands batches to its function, deleting what the batch response does not report
//     failed (ReportBatchItemFailures), as Lambda's poller does;
//   - the rule: eventsource.Schedule invokes the consumer with the rule's scheduled event (its
//     ARN in resources), on a faster tick than the rule's rate (see consumerTick);
//   - Lambda's Invoke API: lambdaruntime.InvokeServer, so a worker's status calls reach the
//     status binary under the name its ATF_STATUS_FUNCTION gives.
//
// It needs make build (the zips the template references) and make cdk-cli first; make test and
// make e2e-deployed run both, and require the test (ATF_AWS_TESTS or ATF_DEPLOYED_TESTS=require).
// Moto runs on ATF_DEPLOY_MOTO_PORT [5100]. ATF_DEPLOYED_LOGS=1 prints the functions' logs even
// when it passes.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/eventsource"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
	stackapi "github.com/openatf/atf/shared/testkit/deployed"
	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

// deployedEnv is the environment deployed: dev, the one moto can take (localstack/README.md).
const deployedEnv = "dev"

// consumerTick is how often the test invokes the consumer with the rule's event. The rule says
// rate(1 minute) (asserted below); the deployed consumer stops as soon as nothing is due
// (consumerfn.Deployed), so at the rule's rate a task of a gate that opens waits up to a minute
// for the next invocation, and the gate scenario alone would take one. A faster tick does what
// the next minute's invocation would, sooner; a busy invocation still sweeps to the end of its
// event's minute, as on AWS, and invocations never overlap: the consumer runs in one execution
// environment, as at the rule's rate, where an invocation ends within its minute (dev reserves
// no concurrency, so nothing else holds it to one).
const consumerTick = 2 * time.Second

// pollersPerMapping caps the pollers of one event source mapping: Lambda runs up to its
// MaximumConcurrency invocations of it at once; two show that batches of one queue run side by
// side, without loading this 2-core machine with the dozens the stack allows.
const pollersPerMapping = 2

// TestDeployedStack deploys the dev environment into moto (the core stack and each lambda stack of
// lambdas.json), reads back what they created, runs the function binaries as they wire them, and
// runs the core scenarios of atf dev through the Go client: a run with its result, retries ending
// in success, dead and a fatal failure, a paused gate holding a task and an open one running it, a
// flow within a lambda and one across the stacks of two teams, cancels of a waiting and a running
// task, and a task got and tasks listed by status. Then every AWS call the functions made is
// checked against their deployed roles, which moto does not enforce.
func TestDeployedStack(t *testing.T) {
	t.Parallel()
	started := time.Now()
	endpoint := deployIntoMoto(t)
	t.Logf("deployed atf-%s and its lambda stacks into moto in %s", deployedEnv, time.Since(started).Round(time.Second))
	d := readDeployment(t, endpoint)
	// What make deploy-local checks, on the stack this test deployed: every resource the template
	// declares, through the AWS API (the check of cmd/deploycheck).
	t.Run("resources", func(t *testing.T) { checkResources(t, d) })
	run := runDeployment(t, d)
	c := run.client
	ctx := t.Context()

	// Gates first and alone: a pause is the lambda's, and with nothing else in flight the
	// consumer's invocations end at once, so one that started after the schedule has swept it.
	t.Run("gate", func(t *testing.T) {
		if _, err := c.SetGate(ctx, "echo", "", task.GatePause); err != nil {
			t.Fatal(err)
		}
		scheduled := time.Now()
		held := schedule(t, c, "echo", client.ScheduleRequest{ID: "gated", Payload: json.RawMessage(`{"gated":true}`)})
		run.consumer.sweptSince(t, scheduled)
		if got, err := c.Get(ctx, "echo", held.ID); err != nil || got.Status != task.StatusNew {
			t.Fatalf("a task of the paused lambda after a sweep: %s, %v; want new", got.Status, err)
		}
		if !listed(t, c, "echo", task.StatusNew, held.ID) {
			t.Errorf("the list of new echo tasks lacks %s", held.ID)
		}
		if _, err := c.SetGate(ctx, "echo", "", task.GateOpen); err != nil {
			t.Fatal(err)
		}
		done := waitEnd(t, c, "echo", held.ID)
		if done.Status != task.StatusSuccess || compactJSON(done.Result) != `{"gated":true}` || done.Attempts != 1 {
			t.Fatalf("after the gate opened: %s, result %s, %d attempts; want success with the payload after 1", done.Status, done.Result, done.Attempts)
		}
	})

	t.Run("scenarios", func(t *testing.T) {
		t.Run("run", func(t *testing.T) {
			t.Parallel()
			tk := schedule(t, c, "echo", client.ScheduleRequest{ID: "run", Payload: json.RawMessage(`{"hi":"there"}`), Priority: "low"})
			done := waitEnd(t, c, "echo", tk.ID)
			if done.Status != task.StatusSuccess || compactJSON(done.Result) != `{"hi":"there"}` || done.Attempts != 1 || done.Priority != "low" {
				t.Fatalf("%s, result %s, %d attempts, priority %s; want success with the payload after 1, low", done.Status, done.Result, done.Attempts, done.Priority)
			}
		})
		t.Run("delay", func(t *testing.T) {
			t.Parallel()
			tk := schedule(t, c, "echo", client.ScheduleRequest{ID: "delayed", Payload: json.RawMessage(`{"n":1}`), Delay: "2s"})
			done := waitEnd(t, c, "echo", tk.ID)
			if done.Status != task.StatusSuccess || compactJSON(done.Result) != `{"n":1}` || done.UpdatedAt.Before(tk.RunAt) {
				t.Fatalf("%s, result %s, ended %s, run_at %s; want success with the payload after run_at", done.Status, done.Result, done.UpdatedAt, tk.RunAt)
			}
		})
		t.Run("retry", func(t *testing.T) {
			t.Parallel()
			tk := schedule(t, c, "flaky", client.ScheduleRequest{ID: "retried", Payload: json.RawMessage(`{"failures":2}`)})
			done := waitEnd(t, c, "flaky", tk.ID)
			if done.Status != task.StatusSuccess || done.Attempts != 3 || compactJSON(done.Result) != `{"succeeded_on_attempt":3}` {
				t.Fatalf("%s after %d attempts, result %s; want success on the third", done.Status, done.Attempts, done.Result)
			}
		})
		t.Run("dead", func(t *testing.T) {
			t.Parallel()
			tk := schedule(t, c, "flaky", client.ScheduleRequest{ID: "dead", Payload: json.RawMessage(`{"failures":5}`), MaxAttempts: 2})
			done := waitEnd(t, c, "flaky", tk.ID)
			if done.Status != task.StatusDead || done.Attempts != 2 || !strings.Contains(done.Error, "attempt 2 of the 5 that fail on purpose") {
				t.Fatalf("%s after %d attempts, error %q; want dead after 2", done.Status, done.Attempts, done.Error)
			}
		})
		t.Run("fatal", func(t *testing.T) {
			t.Parallel()
			tk := schedule(t, c, "flaky", client.ScheduleRequest{ID: "fatal", Payload: json.RawMessage(`"not an object"`)})
			done := waitEnd(t, c, "flaky", tk.ID)
			if done.Status != task.StatusFatalFailure || done.Attempts != 1 || !strings.Contains(done.Error, "payload must be") {
				t.Fatalf("%s after %d attempts, error %q; want a fatal failure after 1", done.Status, done.Attempts, done.Error)
			}
		})
		t.Run("flow", func(t *testing.T) {
			t.Parallel()
			schedule(t, c, "echo", client.ScheduleRequest{ID: "up", Payload: json.RawMessage(`{"step":1}`)})
			down := schedule(t, c, "echo", client.ScheduleRequest{ID: "down", Payload: json.RawMessage(`{"step":2}`), After: []task.Ref{{ID: "up"}}})
			if down.Status != task.StatusPending && down.Status != task.StatusNew {
				t.Errorf("a task after another, scheduled: %s, want pending (or new if its upstream had ended)", down.Status)
			}
			done := waitEnd(t, c, "echo", down.ID)
			up, err := c.Get(ctx, "echo", "up")
			if err != nil || up.Status != task.StatusSuccess || done.Status != task.StatusSuccess || compactJSON(done.Result) != `{"step":2}` || done.UpdatedAt.Before(up.UpdatedAt) {
				t.Fatalf("upstream %s (%v), downstream %s with %s; want both success, the downstream after", up.Status, err, done.Status, done.Result)
			}
		})
		t.Run("join", func(t *testing.T) {
			t.Parallel()
			// The README tour's diamond end: join, deployed as the example lambdas are, gathers
			// its upstreams' results.
			schedule(t, c, "echo", client.ScheduleRequest{ID: "join-b", Payload: json.RawMessage(`{"text":"b"}`)})
			schedule(t, c, "echo", client.ScheduleRequest{ID: "join-c", Payload: json.RawMessage(`{"text":"c"}`)})
			d := schedule(t, c, "join", client.ScheduleRequest{ID: "d", After: []task.Ref{{Lambda: "echo", ID: "join-b"}, {Lambda: "echo", ID: "join-c"}}})
			done := waitEnd(t, c, "join", d.ID)
			if want := `{"echo/join-b":{"text":"b"},"echo/join-c":{"text":"c"}}`; done.Status != task.StatusSuccess || compactJSON(done.Result) != want {
				t.Fatalf("join: %s with %s (error %q); want success with %s", done.Status, done.Result, done.Error, want)
			}
		})
		t.Run("flow across teams", func(t *testing.T) {
			t.Parallel()
			// Upstream and downstream in lambda stacks of different teams: the API learns both
			// lambdas from their stacks' SSM parameters, and the downstream's release crosses
			// the stacks.
			reg := loadDeployed(t).reg
			upEntry, _ := reg.Lambda("echo")
			downEntry, _ := reg.Lambda("sleep")
			if upEntry.Team == downEntry.Team || upEntry.Stack == downEntry.Stack {
				t.Fatalf("echo (team %s, stack %s) and sleep (team %s, stack %s): want different teams' stacks", upEntry.Team, upEntry.Stack, downEntry.Team, downEntry.Stack)
			}
			schedule(t, c, "echo", client.ScheduleRequest{ID: "team-up", Payload: json.RawMessage(`{"team":"platform"}`)})
			down := schedule(t, c, "sleep", client.ScheduleRequest{ID: "team-down", Payload: json.RawMessage(`{"seconds":0}`), After: []task.Ref{{Lambda: "echo", ID: "team-up"}}})
			if down.Status != task.StatusPending && down.Status != task.StatusNew {
				t.Errorf("a task after another lambda's, scheduled: %s, want pending (or new if its upstream had ended)", down.Status)
			}
			done := waitEnd(t, c, "sleep", down.ID)
			up, err := c.Get(ctx, "echo", "team-up")
			if err != nil || up.Status != task.StatusSuccess || done.Status != task.StatusSuccess || compactJSON(done.Result) != `{"slept_seconds":0}` || done.UpdatedAt.Before(up.UpdatedAt) {
				t.Fatalf("upstream echo %s (%v), downstream sleep %s with %s; want both success, the downstream after", up.Status, err, done.Status, done.Result)
			}
		})
		t.Run("idempotent schedule and wait", func(t *testing.T) {
			t.Parallel()
			req := client.ScheduleRequest{ID: "twice", Payload: json.RawMessage(`{"once":true}`)}
			first := schedule(t, c, "echo", req)
			again, created, err := c.Schedule(ctx, "echo", req)
			if err != nil || created || again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
				t.Fatalf("the same schedule again: created %v, %v; want the first task replayed", created, err)
			}
			// A GET that waits answers once the task ends, through the api function's deadline.
			done, err := c.GetWait(ctx, "echo", first.ID, 20*time.Second)
			if err != nil || done.Status != task.StatusSuccess || compactJSON(done.Result) != `{"once":true}` || done.Attempts != 1 {
				t.Fatalf("wait: %s, result %s, %d attempts, %v; want success with the payload after 1", done.Status, done.Result, done.Attempts, err)
			}
		})
		t.Run("bad input", func(t *testing.T) {
			t.Parallel()
			_, _, err := c.Schedule(ctx, "echo", client.ScheduleRequest{ID: "bad", Priority: "urgent"})
			var apiErr *client.Error
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnprocessableEntity {
				t.Fatalf("a schedule with an unknown priority: %v; want 422, as on atf dev", err)
			}
			if _, err := c.Get(ctx, "echo", "bad"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
				t.Fatalf("the refused task: %v; want 404, nothing stored", err)
			}
		})
		t.Run("ecs lambda without executors", func(t *testing.T) {
			t.Parallel()
			// Deployed without its executors (-c ecs=false): the API takes its tasks and sends
			// them to its queue, which the stack still has; they wait there.
			tk := schedule(t, c, "sleep-long", client.ScheduleRequest{ID: "waits", Payload: json.RawMessage(`{"seconds":1}`)})
			if tk.Status != task.StatusEnqueued {
				t.Fatalf("%s, want enqueued in its deployed queue", tk.Status)
			}
		})
		t.Run("batch item failure", func(t *testing.T) {
			t.Parallel()
			batchItemFailure(t, d, run.batches)
		})
		t.Run("cancel waiting", func(t *testing.T) {
			t.Parallel()
			tk := schedule(t, c, "echo", client.ScheduleRequest{ID: "later", Delay: "1h"})
			got, err := c.Cancel(ctx, "echo", tk.ID)
			if err != nil || got.Status != task.StatusCancelled {
				t.Fatalf("cancel: %s, %v; want cancelled", got.Status, err)
			}
			if again, err := c.Cancel(ctx, "echo", tk.ID); err != nil || again.Status != task.StatusCancelled {
				t.Fatalf("cancel again: %s, %v; want it cancelled, as it stands", again.Status, err)
			}
		})
		t.Run("cancel running", func(t *testing.T) {
			t.Parallel()
			tk := schedule(t, c, "sleep", client.ScheduleRequest{ID: "long", Payload: json.RawMessage(`{"seconds":120}`)})
			waitStatus(t, c, "sleep", tk.ID, task.StatusProcessing)
			got, err := c.Cancel(ctx, "sleep", tk.ID)
			if err != nil || got.Status != task.StatusProcessing || !got.CancelRequested {
				t.Fatalf("cancel: %s, cancel_requested %v, %v; want processing with the cancel requested", got.Status, got.CancelRequested, err)
			}
			// The worker learns it at its next heartbeat and stops the handler.
			if done := waitEnd(t, c, "sleep", tk.ID); done.Status != task.StatusCancelled {
				t.Fatalf("%s (error %q); want cancelled", done.Status, done.Error)
			}
		})
	})

	t.Run("status", func(t *testing.T) {
		got, err := c.Get(ctx, "echo", "run")
		if err != nil || got.Lambda != "echo" || got.Status != task.StatusSuccess || compactJSON(got.Payload) != `{"hi":"there"}` {
			t.Errorf("get echo/run: %+v, %v", got, err)
		}
		var apiErr *client.Error
		if _, err := c.Get(ctx, "echo", "no-such-task"); !errors.As(err, &apiErr) || apiErr.Status != 404 {
			t.Errorf("get a missing task: %v, want 404", err)
		}
		// A path the HTTP API has no route for is API Gateway's 404, not the function's.
		if status, body := httpGet(t, c.Endpoint+"/v1/no-such-route"); status != 404 || body != `{"message":"Not Found"}` {
			t.Errorf("a path no route of the deployed API matches: %d %s, want API Gateway's 404 {\"message\":\"Not Found\"}", status, body)
		}
		// The lambdas the API knows are the registry's the stack was built from, ecs ones too.
		infos, err := c.Lambdas(ctx)
		var names []string
		for _, l := range infos {
			names = append(names, l.Name)
		}
		var want []string
		for _, e := range loadDeployed(t).reg.Lambdas {
			want = append(want, e.Name)
		}
		slices.Sort(names)
		if slices.Sort(want); err != nil || !slices.Equal(names, want) {
			t.Errorf("lambdas %v, %v; want those of lambdas.json, %v", names, err, want)
		}
		for _, w := range []struct {
			lambda string
			status task.Status
			ids    []string
		}{
			{"echo", task.StatusSuccess, []string{"delayed", "down", "gated", "join-b", "join-c", "run", "team-up", "twice", "up"}},
			{"join", task.StatusSuccess, []string{"d"}},
			{"echo", task.StatusCancelled, []string{"later"}},
			{"flaky", task.StatusSuccess, []string{"retried"}},
			{"flaky", task.StatusDead, []string{"dead"}},
			{"flaky", task.StatusFatalFailure, []string{"fatal"}},
			{"sleep", task.StatusCancelled, []string{"long"}},
			{"sleep", task.StatusSuccess, []string{"team-down"}},
		} {
			tasks, _, err := c.List(ctx, task.ListParams{Lambda: w.lambda, Status: w.status})
			var ids []string
			for _, tk := range tasks {
				ids = append(ids, tk.ID)
			}
			slices.Sort(ids)
			if err != nil || !slices.Equal(ids, w.ids) {
				t.Errorf("list %s %s: %v, %v; want %v", w.lambda, w.status, ids, err, w.ids)
			}
		}
		// The failed tasks of every lambda, through the API function's role (audited below).
		failed, _, err := c.ListFailed(ctx, task.FailedParams{})
		var refs []string
		for _, tk := range failed {
			refs = append(refs, tk.Lambda+"/"+tk.ID+" "+string(tk.Status))
		}
		if err != nil || !slices.Contains(refs, "flaky/dead dead") || !slices.Contains(refs, "flaky/fatal fatal_failure") {
			t.Errorf("the failed tasks of every lambda: %v, %v; want flaky/dead and flaky/fatal among them", refs, err)
		}
	})
	t.Run("sigv4", func(t *testing.T) { signedClients(t, c) })
	t.Run("iam", func(t *testing.T) {
		auditIAM(t, d, run.proxies)
		// The API and the consumer learned the lambdas from the lambda stacks' parameters through
		// their proxies: the audit checked that read against their roles too.
		for _, f := range []*deployedFunction{d.only("api"), d.only("consumer")} {
			if !run.proxies[f.name].called("ssm:GetParametersByPath") {
				t.Errorf("%s (%s) never called ssm:GetParametersByPath through its proxy: the audit did not see it read the lambdas", f.name, f.asset)
			}
		}
	})
	t.Logf("deployed, read and ran the scenarios in %s", time.Since(started).Round(time.Second))
}

// deployIntoMoto starts moto on ATF_DEPLOY_MOTO_PORT and deploys the dev stack into it with
// localstack/deploy-local, stopping it when the test ends, and returns its endpoint.
func deployIntoMoto(t *testing.T) string {
	t.Helper()
	// As the AWS suites (awstest): it runs when it can, and skips saying why otherwise, unless
	// required, as make test and make e2e-deployed require it: then what is missing fails it.
	need := func(msg string) {
		t.Helper()
		if os.Getenv("ATF_DEPLOYED_TESTS") == "require" || os.Getenv("ATF_AWS_TESTS") == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if zips, _ := filepath.Glob("../bin/lambda/*.zip"); len(zips) == 0 {
		need("no function zips in bin/lambda, which the template references: run make build (make e2e-deployed does)")
	}
	if _, err := os.Stat("../.tools/node_modules/.bin/cdk"); err != nil {
		need("no CDK CLI in .tools: run make cdk-cli (make e2e-deployed does)")
	}
	port := cmp.Or(os.Getenv("ATF_DEPLOY_MOTO_PORT"), "5100")
	// A moto of its own: one already on the port may hold another deployment, and stopping it
	// at the end would take it from whoever started it.
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
		conn.Close()
		need("port " + port + " (ATF_DEPLOY_MOTO_PORT) is taken: stop what listens there (localstack/deploy-local stop) or set another port")
	}
	script := func(ctx context.Context, args ...string) error {
		cmd := exec.CommandContext(ctx, "../localstack/deploy-local", args...)
		cmd.Env = append(os.Environ(), "ATF_DEPLOY_MOTO_PORT="+port)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("localstack/deploy-local %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := script(ctx, "stop"); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := script(ctx, "start"); err != nil {
		t.Fatal(err)
	}
	if err := script(ctx, "deploy", deployedEnv); err != nil {
		t.Fatal(err)
	}
	// localhost, as the script's own endpoint (moto tells S3 from its other services by host).
	return "http://localhost:" + port
}

// deployedTemplate is the template of stack that localstack/deploy-local deployed: it
// synthesizes into bin/deploy-local/cdk.out.
func deployedTemplate(stack string) string {
	return filepath.Join("..", "bin", "deploy-local", "cdk.out", stack+".template.json")
}

// checkResources runs the resource check of make deploy-local (stackapi.Check, as cmd/deploycheck
// runs it) on each deployed stack against the template it was deployed from, and fails on any
// problem. What moto does not apply, and applies otherwise than AWS, is logged.
func checkResources(t *testing.T, d *deployment) {
	t.Helper()
	for _, st := range d.stacks {
		t.Run(st.Name, func(t *testing.T) { checkStackResources(t, d, st) })
	}
}

func checkStackResources(t *testing.T, d *deployment, st *stackapi.Stack) {
	t.Helper()
	tpl, err := stackapi.LoadTemplate(deployedTemplate(st.Name))
	if err != nil {
		t.Fatalf("the template deploy-local deployed: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := stackapi.Check(ctx, d.clients, tpl, st)
	t.Logf("%d resources verified through the AWS API", len(r.Verified))
	for _, l := range slices.Concat(r.NotApplied, r.NotVerified, r.Differences) {
		t.Log("  not checked or known to differ: " + l)
	}
	for _, p := range r.Problems {
		t.Error(p)
	}
	if len(r.Verified) == 0 {
		t.Error("no resource verified")
	}
}

// deployment is what the deployed stacks of the environment say, read through the AWS API.
type deployment struct {
	endpoint string
	clients  *stackapi.Clients
	stack    *stackapi.Stack // the core stack, atf-<env>: its outputs name the table and queue prefix
	// stacks are every stack of the environment: the core first, then each lambda stack
	// atf-<env>-<stack>, by name.
	stacks    []*stackapi.Stack
	functions map[string]*deployedFunction // by function name
	// partitionKey is the table's partition key attribute, for the IAM audit's LeadingKeys.
	partitionKey string
	mappings     []eventSourceMapping
	rule         scheduleRule
}

// deployedFunction is a function's deployed configuration, and the source of its code.
type deployedFunction struct {
	name     string
	asset    string // the zip of bin/lambda its code is, without .zip: api, consumer, status, workers-<handler>
	env      map[string]string
	timeout  time.Duration
	memoryMB int
	reserved int // its reserved concurrency; 0 if none
}

// binary is the folder of functions/ its code was built from, which names its host build in bins.
func (f *deployedFunction) binary() string { return strings.TrimPrefix(f.asset, "workers-") }

// eventSourceMapping is an SQS event source mapping as deployed.
type eventSourceMapping struct {
	function       string // the function's name
	queue          string // the queue's name
	batchSize      int
	reportFailures bool // ReportBatchItemFailures
	maxConcurrency int  // ScalingConfig.MaximumConcurrency; 0 if unset
}

// scheduleRule is the consumer's rule as deployed.
type scheduleRule struct {
	name, arn, schedule string
	period              time.Duration // of schedule
	target              string        // the function it invokes
}

// clientsAt returns clients of every service at endpoint, with moto's dummy credentials, and no
// endpoint or profile from the environment (make test's point at the emulators, not this moto).
func clientsAt(endpoint string) *stackapi.Clients { return stackapi.NewClients(awsConfigAt(endpoint)) }

func awsConfigAt(endpoint string) aws.Config {
	return aws.Config{
		Region:       lambdaruntime.DefaultRegion,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
	}
}

// readDeployment reads every stack of the environment (its outputs and resources), every
// function's configuration and code, the event source mappings and the rule.
func readDeployment(t *testing.T, endpoint string) *deployment {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	d := &deployment{endpoint: endpoint, clients: clientsAt(endpoint), functions: map[string]*deployedFunction{}}
	for _, name := range environmentStacks(ctx, t, d.clients.CloudFormation) {
		st, err := stackapi.Read(ctx, d.clients.CloudFormation, name)
		if err != nil {
			t.Fatal(err)
		}
		d.stacks = append(d.stacks, st)
	}
	d.stack = d.stacks[0]
	table, err := d.clients.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(d.stack.Table())})
	if err != nil {
		t.Fatalf("table %s of the core stack's output: %v", d.stack.Table(), err)
	}
	for _, k := range table.Table.KeySchema {
		if k.KeyType == dynamodbtypes.KeyTypeHash {
			d.partitionKey = aws.ToString(k.AttributeName)
		}
	}

	// The code of each function is one of make build's zips: Lambda's CodeSha256 is the
	// base64 SHA-256 of the zip. That says which main of functions/ it runs, built here for
	// this machine by TestMain from the same source.
	zips, err := filepath.Glob("../bin/lambda/*.zip")
	if err != nil {
		t.Fatal(err)
	}
	assetBySHA := map[string]string{}
	for _, z := range zips {
		b, err := os.ReadFile(z)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		assetBySHA[base64.StdEncoding.EncodeToString(sum[:])] = strings.TrimSuffix(filepath.Base(z), ".zip")
	}
	for id, r := range d.resources("AWS::Lambda::Function") {
		out, err := d.clients.Lambda.GetFunction(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(r.PhysicalID)})
		if err != nil {
			t.Fatalf("function %s (%s): %v", r.PhysicalID, id, err)
		}
		cfg := out.Configuration
		f := &deployedFunction{
			name: aws.ToString(cfg.FunctionName), asset: assetBySHA[aws.ToString(cfg.CodeSha256)],
			timeout: time.Duration(aws.ToInt32(cfg.Timeout)) * time.Second, memoryMB: int(aws.ToInt32(cfg.MemorySize)),
			env: map[string]string{},
		}
		if f.asset == "" {
			t.Fatalf("function %s (%s): its code (SHA-256 %s) is none of the zips in bin/lambda: the deployment is not of this build", f.name, id, aws.ToString(cfg.CodeSha256))
		}
		if cfg.Environment != nil {
			maps.Copy(f.env, cfg.Environment.Variables)
		}
		if out.Concurrency != nil {
			f.reserved = int(aws.ToInt32(out.Concurrency.ReservedConcurrentExecutions))
		}
		if _, err := os.Stat(filepath.Join(bins, f.binary())); err != nil {
			t.Fatalf("function %s runs %s, which has no main in functions/ built here: %v", f.name, f.asset, err)
		}
		d.functions[f.name] = f
	}

	p := lambda.NewListEventSourceMappingsPaginator(d.clients.Lambda, &lambda.ListEventSourceMappingsInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list event source mappings: %v", err)
		}
		for _, m := range page.EventSourceMappings {
			fn := functionNameOf(aws.ToString(m.FunctionArn))
			if d.functions[fn] == nil {
				continue // another environment's
			}
			esm := eventSourceMapping{
				function: fn, queue: lastField(aws.ToString(m.EventSourceArn), ":"),
				batchSize: int(aws.ToInt32(m.BatchSize)), reportFailures: slices.Contains(m.FunctionResponseTypes, "ReportBatchItemFailures"),
			}
			if m.ScalingConfig != nil {
				esm.maxConcurrency = int(aws.ToInt32(m.ScalingConfig.MaximumConcurrency))
			}
			d.mappings = append(d.mappings, esm)
		}
	}

	for id, r := range d.resources("AWS::Events::Rule") {
		rule, err := d.clients.EventBridge.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(r.PhysicalID)})
		if err != nil {
			t.Fatalf("rule %s (%s): %v", r.PhysicalID, id, err)
		}
		if rule.ScheduleExpression == nil {
			continue // a rule of events, not of a schedule
		}
		if d.rule.name != "" {
			t.Fatalf("two scheduled rules: %s and %s", d.rule.name, r.PhysicalID)
		}
		targets, err := d.clients.EventBridge.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: aws.String(r.PhysicalID)})
		if err != nil || len(targets.Targets) != 1 {
			t.Fatalf("targets of rule %s: %d, %v; want one", r.PhysicalID, len(targets.Targets), err)
		}
		d.rule = scheduleRule{
			name: aws.ToString(rule.Name), arn: aws.ToString(rule.Arn), schedule: aws.ToString(rule.ScheduleExpression),
			target: functionNameOf(aws.ToString(targets.Targets[0].Arn)),
		}
		if d.rule.period, err = ratePeriod(d.rule.schedule); err != nil {
			t.Fatalf("rule %s: %v", d.rule.name, err)
		}
	}
	d.checkWiring(t)
	return d
}

// environmentStacks lists the stacks of the environment deployed, the core atf-<env> first and
// then its lambda stacks atf-<env>-*, by name; it fails unless they are the core and one stack per
// stack of lambdas.json, as localstack/deploy-local deploys them.
func environmentStacks(ctx context.Context, t *testing.T, cf *cloudformation.Client) []string {
	t.Helper()
	core := "atf-" + deployedEnv
	var names []string
	p := cloudformation.NewDescribeStacksPaginator(cf, &cloudformation.DescribeStacksInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list stacks: %v", err)
		}
		for _, st := range page.Stacks {
			name := aws.ToString(st.StackName)
			if (name == core || strings.HasPrefix(name, core+"-")) && st.StackStatus != cftypes.StackStatusDeleteComplete {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names) // the core first: a prefix of every other
	want := []string{core}
	for _, s := range loadDeployed(t).reg.Stacks() {
		want = append(want, core+"-"+s)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("the stacks deployed are %v, want the core and one per stack of lambdas.json: %v", names, want)
	}
	return names
}

// resources are the resources of type typ of every stack, by stack name and logical id.
func (d *deployment) resources(typ string) map[string]stackapi.Resource {
	out := map[string]stackapi.Resource{}
	for _, st := range d.stacks {
		for id, r := range st.Resources {
			if r.Type == typ {
				out[st.Name+"/"+id] = r
			}
		}
	}
	return out
}

// queueURLs are the URLs of the queues of every stack, by queue name.
func (d *deployment) queueURLs() map[string]string {
	out := map[string]string{}
	for _, st := range d.stacks {
		maps.Copy(out, st.QueueURLs())
	}
	return out
}

// checkWiring checks the deployment holds together as the functions need it: the core stack's
// outputs name what every function is given, the API and the consumer read the parameter of
// every lambda stack, each worker's status function is its own lambda's, every queue of a
// worker's lambda feeds it with batch item failures reported, and the rule invokes the consumer
// every minute.
func (d *deployment) checkWiring(t *testing.T) {
	t.Helper()
	table, prefix := d.stack.Table(), d.stack.QueuePrefix()
	if table == "" || prefix == "" {
		t.Fatalf("the stack's outputs %v lack %s or %s", d.stack.Outputs, stackapi.OutputTableName, stackapi.OutputQueuePrefix)
	}
	byAsset := map[string][]*deployedFunction{}
	for _, f := range d.functions {
		byAsset[f.asset] = append(byAsset[f.asset], f)
		if f.env[awsfn.EnvTable] != table || f.env[awsfn.EnvQueuePrefix] != prefix {
			t.Errorf("function %s (%s): %s=%q %s=%q, want the stack's outputs %q and %q", f.name, f.asset,
				awsfn.EnvTable, f.env[awsfn.EnvTable], awsfn.EnvQueuePrefix, f.env[awsfn.EnvQueuePrefix], table, prefix)
		}
	}
	if len(byAsset["api"]) != 1 || len(byAsset["consumer"]) != 1 {
		t.Fatalf("%d api and %d consumer functions, want one each", len(byAsset["api"]), len(byAsset["consumer"]))
	}
	d.checkLambdasParameters(t, byAsset["api"][0], byAsset["consumer"][0])
	if d.rule.target != byAsset["consumer"][0].name || d.rule.period != time.Minute {
		t.Errorf("the rule %s (%s) invokes %q, want the consumer %s every minute", d.rule.name, d.rule.schedule, d.rule.target, byAsset["consumer"][0].name)
	}
	// What AWS refuses and moto accepts: a function's environment over 4 KB, or setting a
	// variable Lambda reserves.
	for _, f := range d.functions {
		size := 0
		for k, v := range f.env {
			size += len(k) + len(v)
			if lambdaReserved[k] || strings.HasPrefix(k, "AWS_LAMBDA_") {
				t.Errorf("function %s (%s) sets %s, which Lambda reserves", f.name, f.asset, k)
			}
		}
		if size > lambdaEnvLimit {
			t.Errorf("function %s (%s): its environment is %d bytes, over the %d Lambda allows", f.name, f.asset, size, lambdaEnvLimit)
		}
	}
	queues := d.queueURLs()
	for _, w := range d.workers() {
		lambdaName := w.env[awsfn.EnvLambda]
		st := d.functions[w.env[awsfn.EnvStatusFunction]]
		if st == nil || st.asset != "status" || st.env[awsfn.EnvLambda] != lambdaName {
			t.Errorf("worker %s of lambda %q: %s=%q is not a status function of that lambda", w.name, lambdaName, awsfn.EnvStatusFunction, w.env[awsfn.EnvStatusFunction])
		}
		var fed []string
		for _, m := range d.mappings {
			if m.function != w.name {
				continue
			}
			fed = append(fed, m.queue)
			if queues[m.queue] == "" || !strings.HasPrefix(m.queue, prefix+"-"+lambdaName+"-") {
				t.Errorf("worker %s of lambda %s is fed from queue %s, not one of its lambda's in the stack", w.name, lambdaName, m.queue)
			}
			if !m.reportFailures || m.batchSize < 1 || m.batchSize > 10 {
				t.Errorf("the mapping of %s to %s: batch size %d, ReportBatchItemFailures %v; want 1 to 10, reported", m.queue, w.name, m.batchSize, m.reportFailures)
			}
			// What AWS refuses and moto accepts: a mapping's MaximumConcurrency outside 2..1000,
			// and a queue whose visibility timeout is shorter than the function's timeout.
			if m.maxConcurrency != 0 && (m.maxConcurrency < 2 || m.maxConcurrency > 1000) {
				t.Errorf("the mapping of %s to %s: MaximumConcurrency %d, outside the 2..1000 AWS accepts", m.queue, w.name, m.maxConcurrency)
			}
			if queues[m.queue] != "" {
				if v := queueVisibility(t, d, m.queue); v < w.timeout {
					t.Errorf("queue %s hides a message %s, less than the timeout %s of %s, which it feeds: AWS refuses the mapping", m.queue, v, w.timeout, w.name)
				}
			}
		}
		if len(fed) == 0 {
			t.Errorf("no event source mapping feeds worker %s of lambda %s", w.name, lambdaName)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, f := range slices.SortedFunc(maps.Values(d.functions), func(a, b *deployedFunction) int { return strings.Compare(a.name, b.name) }) {
		t.Logf("function %s: %s, timeout %s, %d MB, reserved concurrency %d", f.name, f.asset, f.timeout, f.memoryMB, f.reserved)
	}
	for _, m := range d.mappings {
		t.Logf("event source mapping %s -> %s: batch size %d, ReportBatchItemFailures %v, MaximumConcurrency %d", m.queue, m.function, m.batchSize, m.reportFailures, m.maxConcurrency)
	}
	t.Logf("rule %s: %s -> %s", d.rule.name, d.rule.schedule, d.rule.target)
}

// checkLambdasParameters checks that the functions that serve every lambda read them under the
// core stack's LambdasPath, where each lambda stack wrote one parameter, named by its stack.
func (d *deployment) checkLambdasParameters(t *testing.T, fns ...*deployedFunction) {
	t.Helper()
	path := d.stack.Outputs[stackapi.OutputLambdasPath]
	for _, f := range fns {
		if path == "" || f.env[awsfn.EnvLambdasPath] != path {
			t.Errorf("function %s (%s): %s=%q, want the core stack's output %s %q", f.name, f.asset, awsfn.EnvLambdasPath, f.env[awsfn.EnvLambdasPath], stackapi.OutputLambdasPath, path)
		}
	}
	var want []string
	for _, st := range d.stacks[1:] {
		want = append(want, path+strings.TrimPrefix(st.Name, d.stack.Name+"-"))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []string
	p := ssm.NewGetParametersByPathPaginator(d.clients.SSM, &ssm.GetParametersByPathInput{Path: aws.String(path)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("the parameters under %s: %v", path, err)
		}
		for _, prm := range page.Parameters {
			got = append(got, aws.ToString(prm.Name))
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the parameters under %s: %v, want one per lambda stack: %v", path, got, want)
	}
}

// lambdaEnvLimit is the most Lambda allows for all of a function's environment variables.
const lambdaEnvLimit = 4096

// lambdaReserved are the environment variables Lambda sets itself and refuses in a function's
// configuration (with every AWS_LAMBDA_ one).
var lambdaReserved = map[string]bool{
	"_HANDLER": true, "_X_AMZN_TRACE_ID": true, "AWS_DEFAULT_REGION": true, "AWS_REGION": true, "AWS_EXECUTION_ENV": true,
	"AWS_ACCESS_KEY": true, "AWS_ACCESS_KEY_ID": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_SESSION_TOKEN": true,
	"LAMBDA_TASK_ROOT": true, "LAMBDA_RUNTIME_DIR": true,
}

// workers are the worker functions: those given a status function.
func (d *deployment) workers() []*deployedFunction {
	var ws []*deployedFunction
	for _, f := range d.functions {
		if f.env[awsfn.EnvStatusFunction] != "" {
			ws = append(ws, f)
		}
	}
	slices.SortFunc(ws, func(a, b *deployedFunction) int { return strings.Compare(a.name, b.name) })
	return ws
}

func (d *deployment) only(asset string) *deployedFunction {
	for _, f := range d.functions {
		if f.asset == asset {
			return f
		}
	}
	return nil
}

// running is the deployment's functions running under the harness, fed as AWS would.
type running struct {
	client   *client.Client
	consumer *consumerRuns
	proxies  map[string]*auditProxy // by function name
	batches  *batchLog              // what the workers answered for each record their mappings fed them
}

// runDeployment starts every deployed function's binary under the harness with its deployed
// environment (plus moto's endpoint for DynamoDB, SQS and EventBridge, and the Invoke API
// server's for Lambda), the API Gateway proxy in front of the api function, a poller per
// event source mapping and the rule's schedule; all stop when the test ends.
func runDeployment(t *testing.T, d *deployment) *running {
	t.Helper()
	logs := &lambdaruntime.LogBuffer{}
	invoke := lambdaruntime.NewInvokeServer()
	fns := map[string]*lambdaruntime.Function{}
	t.Cleanup(func() {
		for _, f := range fns {
			f.Close()
		}
		invoke.Close()
		if t.Failed() || os.Getenv("ATF_DEPLOYED_LOGS") != "" {
			t.Logf("the functions' logs:\n%s", logs.String())
		}
	})
	pollers := map[string]int{}
	for _, m := range d.mappings {
		pollers[m.function] += min(max(m.maxConcurrency, 1), pollersPerMapping)
	}
	// The consumer one at a time, at the test's faster tick (consumerTick).
	pollers[d.rule.target] = 1
	// Every AWS call of a function goes through a proxy of its own to moto (Lambda's to the
	// Invoke API server), which records it for the IAM audit (deployed_iam_test.go).
	account := strings.Split(d.rule.arn, ":")[4]
	proxies := map[string]*auditProxy{}
	dynamo := &motoDynamo{} // moto's DynamoDB writes are not atomic (motodynamo_test.go)
	for _, f := range d.functions {
		proxy := newAuditProxy(t, dynamo, d.endpoint, invoke.URL, lambdaruntime.DefaultRegion, account, d.partitionKey)
		proxies[f.name] = proxy
		env := maps.Clone(f.env)
		maps.Copy(env, map[string]string{
			"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
			"AWS_ENDPOINT_URL_DYNAMODB": proxy.srv.URL, "AWS_ENDPOINT_URL_SQS": proxy.srv.URL, "AWS_ENDPOINT_URL_EVENTBRIDGE": proxy.srv.URL,
			"AWS_ENDPOINT_URL_LAMBDA": proxy.srv.URL, "AWS_ENDPOINT_URL_SSM": proxy.srv.URL,
		})
		rf := &lambdaruntime.Function{
			Name: f.name, Binary: filepath.Join(bins, f.binary()), Env: env,
			Timeout: f.timeout, MemoryMB: f.memoryMB, Region: lambdaruntime.DefaultRegion,
			Logs: prefixed(logs, f.asset),
			// Its reserved concurrency, or as many as its pollers run at once; the api as many
			// as the scenarios' requests (each waits for a task's end up to the client's MaxWait).
			MaxEnvironments: cmp.Or(f.reserved, pollers[f.name], 16),
		}
		fns[f.name] = rf
		invoke.Add(rf)
	}

	// The event sources stop before the functions do (cleanups run last first): the
	// invocations in flight are cut short, as a test's end leaves nothing to finish them for.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	quiet := slog.New(slog.NewTextHandler(prefixed(logs, "eventsource"), nil))
	batches := &batchLog{records: map[string]recordOutcome{}}
	for _, m := range d.mappings {
		visibility := queueVisibility(t, d, m.queue)
		handler := batches.recording(lambdaruntime.SQSHandler(fns[m.function]))
		if !m.reportFailures { // Lambda ignores the batch response: a success deletes every record
			inner := handler
			handler = func(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
				_, err := inner(ctx, e)
				return events.SQSEventResponse{}, err
			}
		}
		// The mapping polls with the function's role: through the function's proxy.
		src := eventsource.SQS{
			Client: sqs.NewFromConfig(awsConfigAt(proxies[m.function].srv.URL)), Queue: m.queue, Handler: handler, BatchSize: m.batchSize,
			Timeout: d.functions[m.function].timeout, Visibility: visibility, Abort: ctx, Logger: quiet,
		}
		for range min(max(m.maxConcurrency, 1), pollersPerMapping) {
			wg.Go(func() { _ = src.Run(ctx) })
		}
	}
	consumer := d.functions[d.rule.target]
	runs := &consumerRuns{}
	invokeConsumer := lambdaruntime.ScheduledHandler(fns[consumer.name])
	sched := eventsource.Schedule{
		Period: consumerTick, Timeout: consumer.timeout, Rule: d.rule.arn, Logger: quiet,
		Handler: func(ctx context.Context, e events.EventBridgeEvent) error {
			start := time.Now()
			err := invokeConsumer(ctx, e)
			runs.add(start, err)
			return err
		},
	}
	wg.Go(func() { _ = sched.Run(ctx) })

	// The HTTP API's routes are the template's: moto creates none (stackapi's notApplied). Each
	// route authorizes with IAM, as the template's do: a request must be signed.
	creds := envCredentials(t)
	srv := httptest.NewServer(lambdaruntime.APIGateway{Function: fns[d.only("api").name], Routes: routeKeys(t), Auth: &lambdaruntime.SigV4{
		Region: lambdaruntime.DefaultRegion, Credentials: lambdaruntime.StaticCredentials(creds),
	}})
	t.Cleanup(srv.Close)
	signing := &aws.Config{Region: lambdaruntime.DefaultRegion, Credentials: credentials.StaticCredentialsProvider{Value: creds}}
	c := &client.Client{Endpoint: srv.URL, MaxWait: 5 * time.Second, SigV4: signing}
	return &running{client: c, consumer: runs, proxies: proxies, batches: batches}
}

// envCredentials are the environment's credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), which sign the requests to the deployed API, as a user's atf does, and
// which its gateway knows.
func envCredentials(t *testing.T) aws.Credentials {
	t.Helper()
	creds := aws.Credentials{
		AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
	}
	if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
		t.Fatal("the deployed API's requests are signed with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set them (the emulators' environment does)")
	}
	return creds
}

// batchLog records, for each message an event source mapping delivered, the batch it came in
// and what the function answered for it.
type batchLog struct {
	mu      sync.Mutex
	batches int
	records map[string]recordOutcome // by message id; its last delivery
}

type recordOutcome struct {
	batch   int // which batch, in the order the functions answered them
	receipt string
	failed  bool // the function failed, or reported the record as a batch item failure
}

// recording wraps a mapping's handler so that l records its answers.
func (l *batchLog) recording(h eventsource.SQSHandler) eventsource.SQSHandler {
	return func(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
		resp, err := h(ctx, e)
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.batches++
		for _, r := range e.Records {
			l.records[r.MessageId] = recordOutcome{batch: l.batches, receipt: r.ReceiptHandle, failed: err != nil || failed[r.MessageId]}
		}
		return resp, err
	}
}

func (l *batchLog) outcome(id string) (recordOutcome, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.records[id]
	return o, ok
}

// batchItemFailure sends a poison body and a message of a task that does not exist to a deployed
// queue of echo, in one SendMessageBatch, until its worker gets them in one batch (a receive may
// take them apart): the worker reports the poison as a batch item failure and discards the other
// (no such task). The other is deleted, and the poison is not: it stays in flight, to come back
// after the queue's visibility timeout and, after the redrive's count, go to the dead-letter
// queue. Whether a message is still on the queue is told by ChangeMessageVisibility on its
// receipt handle: moto (as SQS) refuses the handle of a deleted message.
func batchItemFailure(t *testing.T, d *deployment, batches *batchLog) {
	t.Helper()
	var queue string
	for _, m := range d.mappings {
		if d.functions[m.function].env[awsfn.EnvLambda] == "echo" && (queue == "" || strings.HasSuffix(m.queue, "-normal")) {
			queue = m.queue
		}
	}
	url := d.queueURLs()[queue]
	if url == "" {
		t.Fatalf("no deployed queue of echo fed by a mapping: %v", d.mappings)
	}
	priority := lastField(queue, "-")
	sqsc := d.clients.SQS
	inFlight := func(receipt string) (bool, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := sqsc.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: &receipt, VisibilityTimeout: 60})
		if invalid := (*sqstypes.ReceiptHandleIsInvalid)(nil); errors.As(err, &invalid) {
			return false, nil
		}
		return err == nil, err
	}
	for try := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		good := fmt.Sprintf(`{"lambda":"echo","priority":%q,"task_id":"no-such-task-%d","attempt":1}`, priority, try)
		out, err := sqsc.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: []sqstypes.SendMessageBatchRequestEntry{
			{Id: aws.String("poison"), MessageBody: aws.String(fmt.Sprintf("not a task message %d", try))},
			{Id: aws.String("good"), MessageBody: aws.String(good)},
		}})
		cancel()
		if err != nil || len(out.Successful) != 2 {
			t.Fatalf("send to %s: %v, %+v", queue, err, out)
		}
		ids := map[string]string{}
		for _, e := range out.Successful {
			ids[aws.ToString(e.Id)] = aws.ToString(e.MessageId)
		}
		var poison, other recordOutcome
		deadline := time.Now().Add(30 * time.Second)
		for {
			var okP, okO bool
			poison, okP = batches.outcome(ids["poison"])
			other, okO = batches.outcome(ids["good"])
			if okP && okO {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the worker of %s did not answer for both messages within 30 s", queue)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !poison.failed || other.failed {
			t.Fatalf("the worker answered the poison as failed: %v, the message of no task: %v; want true, false", poison.failed, other.failed)
		}
		// The deletes of a batch are one call, after the answer: once the other is gone, the
		// poison would be too if the mapping had deleted it.
		for {
			still, err := inFlight(other.receipt)
			if err != nil {
				t.Fatalf("the message of no task: %v", err)
			}
			if !still {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the message the worker did not fail was not deleted within 30 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		still, err := inFlight(poison.receipt)
		if err != nil || !still {
			t.Fatalf("the poison message, reported as a batch item failure: in flight %v (%v); want it in flight, not deleted", still, err)
		}
		// Done with it: it would only come back and fail again until the dead-letter queue.
		ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
		_, err = sqsc.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: aws.String(poison.receipt)})
		cancel()
		if err != nil {
			t.Errorf("delete the poison: %v", err)
		}
		if poison.batch == other.batch {
			return
		}
		t.Logf("try %d: the two messages came in batches of their own; again", try+1)
	}
	t.Fatal("the two messages never came in one batch in 3 tries")
}

// httpGet returns the status and body of a GET of url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// routeKeys are the route keys of the HTTP API of the core stack's template deploy-local deployed.
func routeKeys(t *testing.T) []string {
	t.Helper()
	tpl, err := stackapi.LoadTemplate(deployedTemplate("atf-" + deployedEnv))
	if err != nil {
		t.Fatalf("the template deploy-local deployed: %v", err)
	}
	var keys []string
	for _, id := range tpl.LogicalIDs("AWS::ApiGatewayV2::Route") {
		key, _ := tpl.Resources[id].Properties["RouteKey"].(string)
		if key == "" {
			t.Fatalf("route %s of the template has no RouteKey", id)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		t.Fatal("the template has no route of the HTTP API")
	}
	return keys
}

// queueVisibility is the visibility timeout the queue was deployed with, which Lambda's poller
// receives with.
func queueVisibility(t *testing.T, d *deployment, queue string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := d.clients.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(d.queueURLs()[queue]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout},
	})
	if err != nil {
		t.Fatalf("queue %s: %v", queue, err)
	}
	s, err := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameVisibilityTimeout)])
	if err != nil {
		t.Fatalf("queue %s: visibility timeout %q", queue, out.Attributes[string(sqstypes.QueueAttributeNameVisibilityTimeout)])
	}
	return time.Duration(s) * time.Second
}

// consumerRuns records the consumer's invocations: when each started, and that it ended.
type consumerRuns struct {
	mu     sync.Mutex
	starts []time.Time
	errs   []error
}

func (r *consumerRuns) add(start time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts, r.errs = append(r.starts, start), append(r.errs, err)
}

// sweptSince waits until an invocation that started after since has ended, and fails the test
// if it failed.
func (r *consumerRuns) sweptSince(t *testing.T, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(time.Minute + 30*time.Second) // an invocation sweeps its minute at most
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for i, s := range r.starts {
			if s.After(since) {
				err := r.errs[i]
				r.mu.Unlock()
				if err != nil {
					t.Fatalf("the consumer's invocation failed: %v", err)
				}
				return
			}
		}
		r.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no invocation of the consumer ended within 90 s")
}

func schedule(t *testing.T, c *client.Client, lambda string, req client.ScheduleRequest) task.Task {
	t.Helper()
	tk, created, err := c.Schedule(t.Context(), lambda, req)
	if err != nil || !created {
		t.Fatalf("schedule %s/%s: created %v, %v", lambda, req.ID, created, err)
	}
	return tk
}

// waitEnd waits, through the API, for the task to end: at most a minute, far more than any
// scenario needs.
func waitEnd(t *testing.T, c *client.Client, lambda, id string) task.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tk, err := c.Wait(ctx, lambda, id)
	if err != nil {
		// The wait's answer is lost with its deadline: read the task as it stands, and its
		// upstreams, to say where it stopped.
		seen, gerr := c.Get(context.WithoutCancel(ctx), lambda, id)
		msg := fmt.Sprintf("wait for %s/%s: %v; it is %s after %d attempts (read: %v)", lambda, id, err, seen.Status, seen.Attempts, gerr)
		for _, up := range seen.After {
			u, uerr := c.Get(context.WithoutCancel(ctx), up.Lambda, up.ID)
			msg += fmt.Sprintf("; upstream %s/%s is %s after %d attempts, updated %s (read: %v)", up.Lambda, up.ID, u.Status, u.Attempts, u.UpdatedAt.Format(time.RFC3339Nano), uerr)
		}
		t.Fatal(msg)
	}
	return tk
}

// waitStatus polls the task until it has status want, for at most a minute.
func waitStatus(t *testing.T, c *client.Client, lambda, id string, want task.Status) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		tk, err := c.Get(t.Context(), lambda, id)
		if err == nil && tk.Status == want {
			return
		}
		if time.Now().After(deadline) || err == nil && tk.Status.Terminal() {
			t.Fatalf("%s/%s is %s (%v), want %s", lambda, id, tk.Status, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listed reports whether the lambda's tasks of status include id.
func listed(t *testing.T, c *client.Client, lambda string, status task.Status, id string) bool {
	t.Helper()
	tasks, _, err := c.List(t.Context(), task.ListParams{Lambda: lambda, Status: status})
	if err != nil {
		t.Fatalf("list %s %s: %v", lambda, status, err)
	}
	return slices.ContainsFunc(tasks, func(tk task.Task) bool { return tk.ID == id })
}

func compactJSON(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// functionNameOf is the name in a function's ARN.
func functionNameOf(arn string) string {
	_, name, _ := strings.Cut(arn, ":function:")
	name, _, _ = strings.Cut(name, ":")
	return name
}

func lastField(s, sep string) string { return s[strings.LastIndex(s, sep)+len(sep):] }

var rateExpr = regexp.MustCompile(`^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$`)

// ratePeriod is the period of an EventBridge rate expression.
func ratePeriod(expr string) (time.Duration, error) {
	m := rateExpr.FindStringSubmatch(expr)
	if m == nil {
		return 0, fmt.Errorf("schedule %q is not a rate expression", expr)
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[strings.TrimSuffix(m[2], "s")]
	return time.Duration(n) * unit, nil
}
