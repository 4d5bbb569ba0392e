package task

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func pendingTask(t *testing.T, rule string, after ...Ref) Task {
	t.Helper()
	now := time.Unix(1000, 0).UTC()
	tk, err := New(Spec{ID: "d", After: after, Trigger: rule}, Lambda{Name: "l", Priorities: []string{"p"}}, now, Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestNewWithAfter(t *testing.T) {
	tk := pendingTask(t, "", Ref{ID: "a"}, Ref{Lambda: "m", ID: "b"})
	if tk.Status != StatusPending || tk.NextTriggerAt == nil || !tk.NextTriggerAt.Equal(tk.CreatedAt) {
		t.Errorf("a task with upstreams is %s due %v; want pending, due at once for its check", tk.Status, tk.NextTriggerAt)
	}
	if want := []Ref{{"l", "a"}, {"m", "b"}}; !slices.Equal(tk.After, want) || tk.AfterCount != 2 || tk.TriggerRule() != TriggerAllSuccess {
		t.Errorf("after %v (%d), rule %s; want %v resolved to the lambda, all_success", tk.After, tk.AfterCount, tk.TriggerRule(), want)
	}
	plain := pendingTask(t, "")
	same := pendingTask(t, "")
	if plain.Spec != same.Spec || plain.Spec == tk.Spec {
		t.Error("the fingerprint must tell apart a request with upstreams, and match its replay")
	}
}

func TestRefJSON(t *testing.T) {
	var refs []Ref
	if err := json.Unmarshal([]byte(`["a", {"lambda": "m", "id": "b"}]`), &refs); err != nil {
		t.Fatal(err)
	}
	if want := []Ref{{ID: "a"}, {Lambda: "m", ID: "b"}}; !slices.Equal(refs, want) {
		t.Errorf("got %v, want %v", refs, want)
	}
	if err := json.Unmarshal([]byte(`[3]`), &refs); err == nil {
		t.Error("a number is not an upstream")
	}
}

func TestSettleAllSuccess(t *testing.T) {
	tk := pendingTask(t, "", Ref{ID: "a"}, Ref{ID: "b"})
	now := tk.CreatedAt.Add(time.Second)
	a := Settled{Index: 0, Up: Ref{"l", "a"}, Status: StatusSuccess}
	b := Settled{Index: 1, Up: Ref{"l", "b"}, Status: StatusSuccess}
	one, err := Settle(tk, []Settled{a}, now)
	if err != nil || one.Status != StatusPending || !one.Settled.Has(0) || one.Settled.Has(1) {
		t.Fatalf("settle a: %v %s %v", err, one.Status, one.Settled)
	}
	if tk.Settled.Has(0) {
		t.Error("Settle changed the task it was given")
	}
	if _, err := Settle(one, []Settled{a}, now); !errors.Is(err, ErrNotDue) {
		t.Errorf("settling a again: %v, want ErrNotDue (nothing to write)", err)
	}
	two, err := Settle(one, []Settled{a, b}, now)
	if err != nil || two.Status != StatusNew || !two.NextTriggerAt.Equal(now) {
		t.Errorf("settle b: %v %s due %v; want new, due now", err, two.Status, two.NextTriggerAt)
	}
}

func TestSettleFailure(t *testing.T) {
	tk := pendingTask(t, "", Ref{ID: "a"}, Ref{ID: "b"})
	now := tk.CreatedAt
	got, err := Settle(tk, []Settled{{Index: 1, Up: Ref{"l", "b"}, Status: StatusDead}}, now)
	if err != nil || got.Status != StatusUpstreamFailed || got.NextTriggerAt != nil || !strings.Contains(got.Error, "l/b") || !strings.Contains(got.Error, "dead") {
		t.Errorf("got %v %s %q; want upstream_failed naming l/b and dead", err, got.Status, got.Error)
	}
	if _, err := Settle(got, []Settled{{Index: 0, Up: Ref{"l", "a"}, Status: StatusSuccess}}, now); !errors.Is(err, ErrConflict) {
		t.Errorf("settling an ended task: %v, want ErrConflict", err)
	}
	done := pendingTask(t, TriggerAllDone, Ref{ID: "a"}, Ref{ID: "b"})
	got, err = Settle(done, []Settled{{Index: 0, Status: StatusCancelled}, {Index: 1, Status: StatusFatalFailure}}, now)
	if err != nil || got.Status != StatusNew {
		t.Errorf("all_done: %v %s, want new", err, got.Status)
	}
	if _, err := Settle(done, []Settled{{Index: 2, Status: StatusSuccess}, {Index: 0, Status: StatusProcessing}}, now); !errors.Is(err, ErrNotDue) {
		t.Errorf("an index out of range and a running upstream settle nothing: %v", err)
	}
}

func TestDownstreamTrigger(t *testing.T) {
	now := time.Unix(2000, 0).UTC()
	tk := pendingTask(t, "", Ref{ID: "a"})
	tk.Status, tk.NextTriggerAt = StatusNew, &now
	marked, err := MarkDownstream(tk, now)
	if err != nil || !marked.Downstream || marked.Version != tk.Version+1 {
		t.Fatalf("mark: %v %+v", err, marked)
	}
	if _, err := MarkDownstream(marked, now); !errors.Is(err, ErrExists) {
		t.Errorf("mark again: %v, want ErrExists", err)
	}
	ended, _ := Cancel(marked, now)
	if ended.NextTriggerAt == nil || !ended.NextTriggerAt.Equal(now) {
		t.Fatalf("an ended task with downstreams keeps a trigger; got %v", ended.NextTriggerAt)
	}
	part, err := Notified(ended, "c1", false, now)
	if err != nil || part.NextTriggerAt == nil || part.NotifyCursor != "c1" {
		t.Errorf("notified in part: %v %v %q", err, part.NextTriggerAt, part.NotifyCursor)
	}
	all, err := Notified(part, "", true, now)
	if err != nil || all.NextTriggerAt != nil || all.Status != StatusCancelled {
		t.Errorf("notified: %v %v %s", err, all.NextTriggerAt, all.Status)
	}
	if _, err := Notified(all, "", true, now); !errors.Is(err, ErrConflict) {
		t.Errorf("notified twice: %v, want ErrConflict", err)
	}
	// An already ended task marked later is due at once.
	plain := pendingTask(t, "")
	plain, _ = Cancel(plain, now)
	late, _ := MarkDownstream(plain, now)
	if late.NextTriggerAt == nil {
		t.Error("an ended task marked as an upstream must come due to tell its downstreams")
	}
}

func TestAddUpstreams(t *testing.T) {
	now := time.Unix(3000, 0).UTC()
	tk := pendingTask(t, "")
	if tk.Status != StatusNew {
		t.Fatalf("status %s", tk.Status)
	}
	got, err := AddUpstreams(tk, []Ref{{"l", "a"}}, now)
	if err != nil || got.Status != StatusPending || got.AfterCount != 1 || got.NextTriggerAt == nil {
		t.Fatalf("add: %v %+v", err, got)
	}
	if _, err := AddUpstreams(got, []Ref{{"l", "a"}}, now); !errors.Is(err, ErrInvalid) {
		t.Errorf("adding a listed upstream: %v, want ErrInvalid", err)
	}
	got.Status, got.Attempts = StatusProcessing, 1
	if _, err := AddUpstreams(got, []Ref{{"l", "b"}}, now); !errors.Is(err, ErrConflict) {
		t.Errorf("adding to a started task: %v, want ErrConflict", err)
	}
}

func TestFindCycle(t *testing.T) {
	a, b, c, d := Ref{"l", "a"}, Ref{"l", "b"}, Ref{"m", "c"}, Ref{"l", "d"}
	if got := FindCycle(map[Ref][]Ref{d: {b, c}, b: {a}, c: {a}}); got != nil {
		t.Errorf("a diamond has no cycle; got %v", got)
	}
	got := FindCycle(map[Ref][]Ref{a: {b}, b: {c}, c: {a}, d: {a}})
	if len(got) != 4 || got[0] != got[3] {
		t.Fatalf("cycle %v; want its three tasks with the first again at the end", got)
	}
	for _, want := range []string{"l/a", "l/b", "m/c"} {
		if !slices.Contains(got, want) {
			t.Errorf("cycle %v lacks %s", got, want)
		}
	}
	chain := map[Ref][]Ref{}
	for i := 1; i < MaxAfter; i++ {
		chain[Ref{"l", strconv.Itoa(i)}] = []Ref{{"l", strconv.Itoa(i - 1)}}
	}
	if FindCycle(chain) != nil {
		t.Error("a long chain has no cycle")
	}
	chain[Ref{"l", "0"}] = []Ref{{"l", strconv.Itoa(MaxAfter - 1)}}
	if got := FindCycle(chain); len(got) != MaxAfter+1 {
		t.Errorf("a chain closed into a ring: cycle of %d, want %d", len(got), MaxAfter+1)
	}
}

func TestBitmap(t *testing.T) {
	var b Bitmap
	for _, i := range []int{0, 7, 8, 9999} {
		b = b.With(i)
	}
	if !b.Has(9999) || b.Has(1) || b.Count(10000) != 4 || b.Count(9) != 3 || len(b) != 1250 {
		t.Errorf("bitmap %d bytes, count %d", len(b), b.Count(10000))
	}
}
