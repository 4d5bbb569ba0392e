package awsfn_test

import (
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/awsfn"
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
