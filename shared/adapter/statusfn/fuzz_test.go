package statusfn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// fuzzFixtures are the statuses a fuzzed request's task may be in before it; none is no task.
var fuzzFixtures = []task.Status{"", task.StatusNew, task.StatusEnqueued, task.StatusClaimed, task.StatusProcessing, task.StatusSuccess}

// FuzzHandle decodes arbitrary request JSON as the function does (json.Unmarshal into Request; a
// payload that does not decode is a function error before Handle) and answers it with a Handler
// over a status controller on the embedded store. Before each request its task, if the request
// names a valid one, is put in the status fixture picks (none, new, enqueued, claimed, processing
// or success; claimed and processing with the events' lease), with one attempt allowed if
// fixture's bit 3 is set. Each input has a store namespace of its own. Whatever the request:
//   - Handle never panics, never returns an error, and answers v=1 with an error or a success,
//     never both, and the answer encodes as JSON; a batch (v=2) is answered v=2, refused whole
//     as invalid or with one response per request;
//   - an error carries a code of the contract, never internal, and a message, and the stored task
//     is unchanged; which code is decided by the contract: invalid (version, op, lambda, task id,
//     missing lease, unknown outcome), not_found, conflict (claim of a task not enqueued), or
//     stale_lease (any other op without the running task's lease);
//   - a success answers what the op promises and the store holds it: a claim the claimed task and
//     its new lease, a heartbeat nothing (the task processing), a result the task as it ended,
//     a release nothing (the task new, its attempt not counted).
func FuzzHandle(f *testing.F) {
	for _, seed := range []struct {
		req     string
		fixture uint8
	}{
		{`{"v":1,"op":"claim","lambda":"echo","task_id":"t1"}`, 2},
		{`{"v":1,"op":"claim","lambda":"echo","task_id":"t1"}`, 1},
		{`{"v":1,"op":"heartbeat","lambda":"echo","task_id":"t1","lease":"` + eventLease + `"}`, 3},
		{`{"v":1,"op":"heartbeat","lambda":"echo","task_id":"t1","lease":"other"}`, 4},
		{`{"v":1,"op":"set_result","lambda":"echo","task_id":"t1","lease":"` + eventLease + `","outcome":"success","result":[1, 2.50, "x"]}`, 4},
		{`{"v":1,"op":"set_result","lambda":"echo","task_id":"t1","lease":"` + eventLease + `","outcome":"success","result":"` + strings.Repeat("r", 2000) + `"}`, 4},
		{`{"v":1,"op":"set_result","lambda":"echo","task_id":"t1","lease":"` + eventLease + `","outcome":"retriable","error":"later"}`, 4 | 8},
		{`{"v":1,"op":"set_result","lambda":"echo","task_id":"t1","lease":"` + eventLease + `","outcome":"fatal","error":"no"}`, 5},
		{`{"v":1,"op":"release","lambda":"echo","task_id":"t1","lease":"` + eventLease + `"}`, 3},
		{`{"v":1,"op":"release","lambda":"echo","task_id":"t1","lease":"` + eventLease + `"}`, 0},
		{`{"v":1,"op":"unclaim","lambda":"echo","task_id":"t1","delivery":"AQEB"}`, 3},
		{`{"v":1,"op":"unclaim","lambda":"echo","task_id":"t1","delivery":"AQEB","token":"T1"}`, 3},
		{`{"v":1,"op":"unclaim","lambda":"echo","task_id":"t1"}`, 3},
		{`{"v":1,"op":"claim","lambda":"echo","task_id":"t1","result":null}`, 2},
		{`{"v":1.5,"op":"claim"}`, 2},
		{`{"v":2,"requests":[{"v":1,"op":"claim","lambda":"echo","task_id":"t1"},{"v":1,"op":"heartbeat","lambda":"echo","task_id":"t1"}]}`, 2},
		{`{"v":1,"op":"claim","lambda":"echo","task_id":"t1","requests":[{"v":1}]}`, 2},
		{`{"V":1,"OP":"claim","Lambda":"echo","Task_ID":"t1"}`, 2},
		{`null`, 0},
	} {
		f.Add([]byte(seed.req), seed.fixture)
	}

	store, err := sqlitestore.Open(filepath.Join(f.TempDir(), "atf.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	// A small result limit, so that results over it stay small.
	cfg := task.Config{PayloadLimit: 1 << 10}.WithDefaults()
	quiet := slog.New(slog.DiscardHandler)
	var n atomic.Int64

	f.Fuzz(func(t *testing.T, payload []byte, fixture uint8) {
		var req statusfn.Request
		if json.Unmarshal(payload, &req) != nil {
			return // a function error: the runtime never calls Handle
		}
		ctx := context.Background()
		scoped := &scopedStore{Store: store, scope: fmt.Sprintf("fuzz-%d.", n.Add(1))}
		h := statusfn.NewHandler(status.New(scoped, status.Config{Task: cfg, Logger: quiet}), quiet)

		// The task before.
		state := fuzzFixtures[int(fixture&7)%len(fuzzFixtures)]
		var before *task.Task
		if state != "" && task.ValidateName("lambda", req.Lambda) == nil && task.ValidateID("task_id", req.TaskID) == nil {
			l := task.Lambda{Name: req.Lambda}.WithDefaults()
			if fixture&8 != 0 {
				l.MaxAttempts = 1
			}
			tk := fuzzFixture(t, l, req.TaskID, state, cfg)
			if err := scoped.Create(ctx, tk); err != nil {
				t.Fatal(err)
			}
			before = &tk
		}

		resp, err := h.Handle(ctx, req)
		if err != nil {
			t.Fatalf("Handle returned an error: %v", err)
		}
		if req.V == statusfn.BatchVersion {
			// A batch is answered in its version, whole or item by item (TestBatch checks items).
			refused := resp.Error != nil && resp.Error.Code == "invalid" && len(resp.Responses) == 0
			answered := resp.Error == nil && len(resp.Responses) == len(req.Requests)
			if resp.V != statusfn.BatchVersion || !refused && !answered {
				t.Fatalf("a batch of %d answered %+v", len(req.Requests), resp)
			}
			if _, err := json.Marshal(resp); err != nil {
				t.Fatalf("the answer does not encode: %v", err)
			}
			return
		}
		if resp.V != statusfn.Version {
			t.Fatalf("answered version %d", resp.V)
		}
		out, err := json.Marshal(resp)
		if err != nil {
			t.Fatalf("the answer does not encode: %v", err)
		}
		var back statusfn.Response
		if err := json.Unmarshal(out, &back); err != nil || (back.Error == nil) != (resp.Error == nil) || back.Lease != resp.Lease {
			t.Fatalf("the answer %s does not decode as itself: %v", out, err)
		}

		running := before != nil && (before.Status == task.StatusClaimed || before.Status == task.StatusProcessing)
		var want string // the error code; empty for success
		switch {
		case invalidRequest(req):
			want = "invalid"
		case req.Op == statusfn.OpSetResult && req.Outcome != status.Success && req.Outcome != status.Retriable && req.Outcome != status.Fatal:
			want = "invalid"
		case before == nil:
			want = "not_found"
		case req.Op == statusfn.OpClaim && before.Status != task.StatusEnqueued:
			want = "conflict"
		case req.Op == statusfn.OpUnclaim:
			// The fixtures' claims were made for no delivery: an unclaim finds none of its own.
			want = "stale_lease"
		case req.Op != statusfn.OpClaim && (!running || req.Lease != eventLease):
			want = "stale_lease"
		}

		var stored task.Task
		if before != nil {
			if stored, err = scoped.Get(ctx, req.Lambda, req.TaskID); err != nil {
				t.Fatal(err)
			}
		}
		if resp.Error != nil {
			if resp.Error.Code != want || resp.Error.Message == "" || resp.Task != nil || resp.Lease != "" {
				t.Fatalf("answered %s, want code %q", out, want)
			}
			if before != nil && stored.Version != before.Version {
				t.Fatalf("a refused request changed the task: %+v", stored)
			}
			return
		}
		if want != "" {
			t.Fatalf("answered %s, want code %s", out, want)
		}
		checkSuccess(t, req, resp, *before, stored, cfg)
	})
}

func invalidRequest(r statusfn.Request) bool {
	switch r.Op {
	case statusfn.OpClaim, statusfn.OpHeartbeat, statusfn.OpSetResult, statusfn.OpRelease, statusfn.OpUnclaim:
	default:
		return true
	}
	needsLease := r.Op != statusfn.OpClaim && r.Op != statusfn.OpUnclaim
	return r.V != statusfn.Version || len(r.Requests) > 0 || len(r.Delivery) > statusfn.MaxDelivery || len(r.Token) > statusfn.MaxToken || task.ValidateName("lambda", r.Lambda) != nil ||
		task.ValidateID("task_id", r.TaskID) != nil || needsLease && r.Lease == "" || r.Op == statusfn.OpUnclaim && (r.Delivery == "" || r.Token == "")
}

// checkSuccess: the answer and the stored task are what the op promises.
func checkSuccess(t *testing.T, req statusfn.Request, resp statusfn.Response, before, stored task.Task, cfg task.Config) {
	t.Helper()
	if resp.Task != nil && (resp.Task.ID != req.TaskID || resp.Task.Lambda != req.Lambda || resp.Task.Version != stored.Version || resp.Task.Status != stored.Status) {
		t.Fatalf("answered task %+v; stored %+v", resp.Task, stored)
	}
	switch req.Op {
	case statusfn.OpClaim:
		if resp.Task == nil || resp.Lease == "" || resp.Lease != stored.Lease || stored.Status != task.StatusProcessing || stored.Attempts != before.Attempts+1 {
			t.Fatalf("claim answered %+v; stored %+v", resp, stored)
		}
	case statusfn.OpHeartbeat:
		if resp.Task != nil || resp.Lease != "" || stored.Status != task.StatusProcessing || stored.Lease != eventLease {
			t.Fatalf("heartbeat answered %+v; stored %+v", resp, stored)
		}
	case statusfn.OpRelease:
		if resp.Task != nil || resp.Lease != "" || stored.Status != task.StatusNew || stored.Attempts != before.Attempts-1 || stored.Lease != "" {
			t.Fatalf("release answered %+v; stored %+v", resp, stored)
		}
	case statusfn.OpSetResult:
		if resp.Task == nil || resp.Lease != "" || stored.Lease != "" {
			t.Fatalf("set_result answered %+v; stored %+v", resp, stored)
		}
		switch {
		case req.Outcome == status.Success && len(req.Result) > cfg.PayloadLimit:
			if stored.Status != task.StatusFatalFailure || !strings.Contains(stored.Error, "result is") {
				t.Fatalf("a result over the limit: stored %+v", stored)
			}
		case req.Outcome == status.Success:
			if stored.Status != task.StatusSuccess || !sameResult(stored.Result, req.Result) || stored.Error != "" {
				t.Fatalf("result %s: stored %s %s %q", req.Result, stored.Status, stored.Result, stored.Error)
			}
		case req.Outcome == status.Fatal:
			if stored.Status != task.StatusFatalFailure || stored.Error != req.Error {
				t.Fatalf("fatal %q: stored %s %q", req.Error, stored.Status, stored.Error)
			}
		default:
			want := task.StatusRetriableFailure
			if stored.Attempts >= stored.MaxAttempts {
				want = task.StatusDead
			}
			if stored.Status != want || stored.Error != req.Error {
				t.Fatalf("retriable %q after %d of %d attempts: stored %s %q", req.Error, stored.Attempts, stored.MaxAttempts, stored.Status, stored.Error)
			}
		}
	}
}

// fuzzFixture returns task id of lambda l in status s, moved there by the domain's transitions;
// a claim takes the events' lease.
func fuzzFixture(t *testing.T, l task.Lambda, id string, s task.Status, cfg task.Config) task.Task {
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{ID: id, Payload: json.RawMessage(`{"to":"someone"}`)}, l, now, cfg)
	steps := []func(task.Task) (task.Task, error){
		func(tk task.Task) (task.Task, error) { return task.Enqueue(tk, now, cfg) },
		func(tk task.Task) (task.Task, error) { return task.Claim(tk, eventLease, now, cfg) },
		func(tk task.Task) (task.Task, error) { return task.Succeed(tk, eventLease, nil, now, cfg) },
	}
	for _, step := range steps {
		if err != nil || tk.Status == s || s == task.StatusClaimed && tk.Status == task.StatusProcessing {
			break
		}
		tk, err = step(tk)
	}
	if s == task.StatusClaimed && tk.Status == task.StatusProcessing {
		tk.Status = s // as claimed by an older version, not yet started
	}
	if err != nil || tk.Status != s {
		t.Fatalf("fixture %s: %+v, %v", s, tk, err)
	}
	return tk
}

// scopedStore keeps each fuzz input's tasks apart in one store: it files lambda L as scope+L.
type scopedStore struct {
	task.Store
	scope string
}

func (s *scopedStore) in(t task.Task) task.Task { t.Lambda = s.scope + t.Lambda; return t }
func (s *scopedStore) out(t task.Task) task.Task {
	t.Lambda = strings.TrimPrefix(t.Lambda, s.scope)
	return t
}

func (s *scopedStore) Create(ctx context.Context, t task.Task) error {
	return s.Store.Create(ctx, s.in(t))
}

func (s *scopedStore) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	t, err := s.Store.Get(ctx, s.scope+lambda, id)
	return s.out(t), err
}

func (s *scopedStore) Update(ctx context.Context, t task.Task, prev int64) error {
	return s.Store.Update(ctx, s.in(t), prev)
}

func sameResult(a, b json.RawMessage) bool {
	isNull := func(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }
	if isNull(a) || isNull(b) {
		return isNull(a) && isNull(b)
	}
	decode := func(m json.RawMessage) (v any) {
		dec := json.NewDecoder(bytes.NewReader(m))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}
