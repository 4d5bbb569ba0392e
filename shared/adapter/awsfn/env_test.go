package awsfn_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/ssmcatalog"
	"github.com/openatf/atf/shared/service/lifecycle"
)

// TestEventsEnv: ATF_EVENT_BUS names the bus of lifecycle events (none if unset), and
// ATF_EVENTS_FLUSH the flush after each invocation, a second unless set; a bad value is named.
func TestEventsEnv(t *testing.T) {
	base := map[string]string{awsfn.EnvTable: "t", awsfn.EnvQueuePrefix: "atf-dev", awsfn.EnvLambdas: `[{"name":"a"}]`}
	parse := func(extra map[string]string) (awsfn.Env, error) {
		return awsfn.ParseEnv(func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return base[k]
		})
	}
	e, err := parse(nil)
	if err != nil || e.EventBus != "" || e.EventsFlush != lifecycle.DefaultFlushTimeout {
		t.Fatalf("no bus: %+v, %v", e, err)
	}
	e, err = parse(map[string]string{awsfn.EnvEventBus: "atf-dev", awsfn.EnvEventsFlush: "250ms"})
	if err != nil || e.EventBus != "atf-dev" || e.EventsFlush != 250*time.Millisecond {
		t.Fatalf("bus: %+v, %v", e, err)
	}
	if e, err = parse(map[string]string{awsfn.EnvEventsFlush: "0"}); err != nil || e.EventsFlush != 0 {
		t.Fatalf("flush 0: %+v, %v", e, err)
	}
	for _, bad := range []string{"soon", "-1s"} {
		if _, err := parse(map[string]string{awsfn.EnvEventsFlush: bad}); err == nil || !strings.Contains(err.Error(), awsfn.EnvEventsFlush) {
			t.Errorf("%s=%s: %v, want an error naming it", awsfn.EnvEventsFlush, bad, err)
		}
	}
}

// TestSendFirstEnv: ATF_SEND_FIRST turns on sending first; unset, it is off, for an environment
// whose workers may predate message nonces; a bad value is named.
func TestSendFirstEnv(t *testing.T) {
	base := map[string]string{awsfn.EnvTable: "t", awsfn.EnvQueuePrefix: "atf-dev", awsfn.EnvLambdas: `[{"name":"a"}]`}
	parse := func(v string) (awsfn.Env, error) {
		return awsfn.ParseEnv(func(k string) string {
			if k == awsfn.EnvSendFirst {
				return v
			}
			return base[k]
		})
	}
	for v, want := range map[string]bool{"": false, "false": false, "true": true} {
		if e, err := parse(v); err != nil || e.SendFirst != want {
			t.Errorf("%s=%q: %v, %v; want %v", awsfn.EnvSendFirst, v, e.SendFirst, err, want)
		}
	}
	if _, err := parse("soon"); err == nil || !strings.Contains(err.Error(), awsfn.EnvSendFirst) {
		t.Errorf("%s=soon: %v, want an error naming it", awsfn.EnvSendFirst, err)
	}
}

// TestLogsEnv: on Lambda the function's log stream names its worker, and its log group is where
// its attempts' logs are; outside Lambda both are empty.
func TestLogsEnv(t *testing.T) {
	env := map[string]string{awsfn.EnvTable: "t", awsfn.EnvQueuePrefix: "atf-dev", awsfn.EnvLambdas: `[{"name":"a"}]`}
	e, err := awsfn.ParseEnv(func(k string) string { return env[k] })
	if err != nil || e.Worker != "" || e.LogGroup != "" {
		t.Fatalf("outside Lambda: worker %q, log group %q, %v; want none", e.Worker, e.LogGroup, err)
	}
	env["AWS_LAMBDA_LOG_STREAM_NAME"], env["AWS_LAMBDA_LOG_GROUP_NAME"] = "2026/11/28/[$LATEST]0abc", "/aws/lambda/atf-worker-a"
	e, err = awsfn.ParseEnv(func(k string) string { return env[k] })
	if err != nil || e.Worker != "2026/11/28/[$LATEST]0abc" || e.LogGroup != "/aws/lambda/atf-worker-a" {
		t.Fatalf("on Lambda: worker %q, log group %q, %v", e.Worker, e.LogGroup, err)
	}
}

// TestTaskStore: the store the services write through publishes lifecycle events only when the
// function has a bus.
func TestTaskStore(t *testing.T) {
	if _, ok := (awsfn.Clients{}).TaskStore().(*lifecycle.Store); ok {
		t.Error("without a bus the store publishes")
	}
	p, err := lifecycle.NewPublisher(lifecycle.Config{Sink: lifecycle.NewWriterSink(&strings.Builder{})})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	if _, ok := (awsfn.Clients{Events: p}).TaskStore().(*lifecycle.Store); !ok {
		t.Error("with a bus the store does not publish")
	}
}

// TestLambdasEnv: with ATF_LAMBDAS_PATH the functions that serve every lambda read them from
// SSM, and need no ATF_LAMBDAS; without it ATF_LAMBDAS is required, as it is for a function of
// one lambda (ATF_LAMBDA), which finds its own entry there.
func TestLambdasEnv(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1") // for Open, which calls nothing
	base := map[string]string{awsfn.EnvTable: "atf-dev", awsfn.EnvQueuePrefix: "atf-dev"}
	parse := func(extra map[string]string) (awsfn.Env, error) {
		return awsfn.ParseEnv(func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return base[k]
		})
	}
	quiet := slog.New(slog.DiscardHandler)

	e, err := parse(map[string]string{awsfn.EnvLambdasPath: awsfn.LambdasPath("dev")})
	if err != nil || len(e.Lambdas) != 0 || e.LambdasPath != "/atf/dev/lambdas/" {
		t.Fatalf("path alone: %+v, %v", e, err)
	}
	c, err := awsfn.Open(t.Context(), e, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Catalog.(*ssmcatalog.Catalog); !ok {
		t.Errorf("path alone: catalog %T, want the SSM one", c.Catalog)
	}

	e, err = parse(map[string]string{awsfn.EnvLambdas: `[{"name":"a"}]`})
	if err != nil || len(e.Lambdas) != 1 {
		t.Fatalf("ATF_LAMBDAS alone: %+v, %v", e, err)
	}
	if c, err = awsfn.Open(t.Context(), e, quiet); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := c.Catalog.Lambda(t.Context(), "a"); err != nil || !ok || l.Name != "a" {
		t.Errorf("ATF_LAMBDAS alone: catalog %T finds a: %v, %v", c.Catalog, ok, err)
	}

	for _, tc := range []struct {
		env   map[string]string
		names string
	}{
		{nil, awsfn.EnvLambdas},
		{map[string]string{awsfn.EnvLambdasPath: "atf/dev/lambdas/"}, awsfn.EnvLambdasPath},
		{map[string]string{awsfn.EnvLambdasPath: "/atf/dev/lambdas/", awsfn.EnvLambda: "a"}, awsfn.EnvLambdas},
	} {
		if _, err := parse(tc.env); err == nil || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%v: %v, want an error naming %s", tc.env, err, tc.names)
		}
	}
}
