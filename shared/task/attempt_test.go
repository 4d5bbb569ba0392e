package task

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// claimedBy returns an enqueued task claimed at start with lease "L", as the status controller
// leaves it for worker.
func claimedBy(t *testing.T, worker string, start time.Time) Task {
	t.Helper()
	enq := inStatus(StatusEnqueued)
	enq.Attempts, enq.AttemptSeq = 1, 4 // one attempt in this life, three in a life before
	c, err := Claim(enq, "L", start, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Worker = worker
	return c
}

// TestEndedAttempt: every transition that ends a running attempt names it in Ended, with its
// number over the task's lives, its start (the claim's time), its end, its outcome, the error the
// task keeps and its worker; and keeps its start, end and worker on the task, which a success is
// read back from (LastAttempt).
func TestEndedAttempt(t *testing.T) {
	start, end := now.Add(-3*time.Second), now
	cases := []struct {
		name    string
		end     func(Task) (Task, error)
		outcome Outcome
		error   string
	}{
		{"success", func(r Task) (Task, error) { return Succeed(r, "L", json.RawMessage(`1`), end, cfg) }, OutcomeSuccess, ""},
		{"result too large", func(r Task) (Task, error) {
			return Succeed(r, "L", json.RawMessage(`"`+strings.Repeat("x", cfg.PayloadLimit)+`"`), end, cfg)
		}, OutcomeFatal, "result is"},
		{"retriable", func(r Task) (Task, error) { return Fail(r, "L", "boom", true, end, cfg, 0) }, OutcomeRetriable, "boom"},
		{"retriable, attempts used up", func(r Task) (Task, error) {
			r.MaxAttempts = r.Attempts
			return Fail(r, "L", "boom", true, end, cfg, 0)
		}, OutcomeRetriable, "boom"},
		{"fatal", func(r Task) (Task, error) { return Fail(r, "L", "bad", false, end, cfg, 0) }, OutcomeFatal, "bad"},
		{"timeout", func(r Task) (Task, error) { return Timeout(r, end.Add(cfg.HeartbeatTimeout), cfg, 0) }, OutcomeTimeout, "no heartbeat"},
		{"cancelled", func(r Task) (Task, error) {
			r, err := Cancel(r, start.Add(time.Second))
			if err != nil {
				return r, err
			}
			return CancelRunning(r, "L", end)
		}, OutcomeCancelled, "cancelled while running"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			running := claimedBy(t, "exec-1", start)
			if running.AttemptSeq != 5 || running.StartedAt == nil || !running.StartedAt.Equal(start) || running.EndedAt != nil {
				t.Fatalf("claimed: attempt %d started %v ended %v; want attempt 5 started at the claim", running.AttemptSeq, running.StartedAt, running.EndedAt)
			}
			ended, err := c.end(running)
			if err != nil {
				t.Fatal(err)
			}
			a := ended.Ended
			wantEnd := end
			if c.outcome == OutcomeTimeout {
				wantEnd = end.Add(cfg.HeartbeatTimeout)
			}
			if a == nil || a.Number != 5 || !a.StartedAt.Equal(start) || !a.EndedAt.Equal(wantEnd) || a.Outcome != c.outcome ||
				!strings.HasPrefix(a.Error, c.error) || a.Error != ended.Error || a.Worker != "exec-1" {
				t.Fatalf("Ended = %+v; want attempt 5 from %s to %s, %s, error %q..., worker exec-1", a, start, wantEnd, c.outcome, c.error)
			}
			if ended.EndedAt == nil || !ended.EndedAt.Equal(wantEnd) {
				t.Errorf("EndedAt = %v, want %s", ended.EndedAt, wantEnd)
			}
			last, ok := ended.LastAttempt()
			if ok != (c.outcome == OutcomeSuccess) || ok && last != *a {
				t.Errorf("LastAttempt = %+v, %v; want the attempt for a success alone", last, ok)
			}
		})
	}
}

// TestEndedAttemptKept: a retry sent ahead in the write of the failure keeps the failure's
// record; the transitions that end no attempt (a heartbeat, a hand-back, a hand-back of a claim
// whose task was cancelled meanwhile) name none, and a hand-back takes its number back; a redrive
// keeps the count.
func TestEndedAttemptKept(t *testing.T) {
	running := claimedBy(t, "exec-1", now)
	failed, err := Fail(running, "L", "boom", true, now, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	ahead, _, err := RetryAhead(failed, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ahead.Ended == nil || *ahead.Ended != *failed.Ended {
		t.Errorf("sent ahead: Ended = %+v, want the failure's %+v", ahead.Ended, failed.Ended)
	}

	beat, err := Heartbeat(claimedBy(t, "exec-1", now), "L", now, cfg)
	if err != nil || beat.Ended != nil {
		t.Errorf("heartbeat: Ended = %+v, %v; want none", beat.Ended, err)
	}
	back, err := Release(claimedBy(t, "exec-1", now), "L", now)
	if err != nil || back.Ended != nil || back.AttemptSeq != 4 {
		t.Errorf("release: Ended = %+v, AttemptSeq %d, %v; want none, and 4 again", back.Ended, back.AttemptSeq, err)
	}

	// A claim handed back after its task's cancel was accepted: nothing ran under it, so the
	// task ends cancelled with no attempt counted or named.
	marked, err := Cancel(claimedBy(t, "exec-1", now), now)
	if err != nil {
		t.Fatal(err)
	}
	unclaimed, err := Unclaim(marked, "L", now)
	if err != nil || unclaimed.Status != StatusCancelled || unclaimed.Ended != nil || unclaimed.Attempts != 1 || unclaimed.AttemptSeq != 4 {
		t.Errorf("hand-back of a cancelled claim: %s, Ended = %+v, attempts %d, AttemptSeq %d, %v; want cancelled, none, 1 and 4 again",
			unclaimed.Status, unclaimed.Ended, unclaimed.Attempts, unclaimed.AttemptSeq, err)
	}

	dead, err := Fail(claimedBy(t, "exec-1", now), "L", "bad", false, now, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Redrive(dead, RedriveOptions{}, now, cfg)
	if err != nil || again.Attempts != 0 || again.AttemptSeq != 5 {
		t.Errorf("redrive: attempts %d, AttemptSeq %d, %v; want 0 and 5 kept", again.Attempts, again.AttemptSeq, err)
	}
}

// TestNewHistory: a history is the latest MaxHistory attempts, oldest first, whatever order
// they come in, with the count of those before, and an empty list (not nil) when there are none.
func TestNewHistory(t *testing.T) {
	var kept []Attempt
	for n := MaxHistory + 3; n >= 1; n-- {
		kept = append(kept, Attempt{Number: n})
	}
	h := NewHistory(kept)
	if len(h.Attempts) != MaxHistory || h.Attempts[0].Number != 4 || h.Attempts[MaxHistory-1].Number != MaxHistory+3 || h.Dropped != 3 {
		t.Errorf("NewHistory: %d attempts from %d, %d dropped; want %d from 4, 3 dropped", len(h.Attempts), h.Attempts[0].Number, h.Dropped, MaxHistory)
	}
	empty, err := json.Marshal(NewHistory(nil))
	if err != nil || string(empty) != `{"attempts":[],"attempts_dropped":0}` {
		t.Errorf("empty history: %s, %v", empty, err)
	}
	a := Attempt{Number: 1, StartedAt: now, EndedAt: now.Add(1500 * time.Millisecond), Outcome: OutcomeSuccess, Worker: "w"}
	b, err := json.Marshal(a)
	if err != nil || !strings.Contains(string(b), `"duration_ms":1500`) || !strings.Contains(string(b), `"error":""`) {
		t.Errorf("attempt JSON: %s, %v; want duration_ms 1500 and an empty error", b, err)
	}
}

// TestLoggedAttempt: Logged puts a log on the attempt a transition ended, its last MaxLogBytes cut
// at a character boundary, without touching the record it was given; a transition that ended no
// attempt takes none. The attempt keeps where its logs are, as its claim left them on the task,
// and a new claim forgets the last one's.
func TestLoggedAttempt(t *testing.T) {
	running := claimedBy(t, "exec-1", now)
	running.LogLocation = &LogLocation{Group: "g", Stream: "s", RequestID: "r"}
	ended, err := Succeed(running, "L", nil, now.Add(time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	long := "é" + strings.Repeat("x", MaxLogBytes-2) + "\n" // the cut falls inside the é
	logged := ended.Logged(long)
	if got := logged.Ended.Log; len(got) != MaxLogBytes-1 || !strings.HasSuffix(got, "x\n") || !utf8.ValidString(got) {
		t.Errorf("log of %d bytes, valid %v; want the last %d bytes, cut where a character starts", len(got), utf8.ValidString(got), MaxLogBytes-1)
	}
	if ended.Ended.Log != "" {
		t.Error("Logged changed the record it was given")
	}
	if logged.Ended.LogLocation != running.LogLocation {
		t.Errorf("the attempt's logs are at %+v, want its claim's %+v", logged.Ended.LogLocation, running.LogLocation)
	}
	if last, ok := logged.LastAttempt(); !ok || last.LogLocation != running.LogLocation {
		t.Errorf("LastAttempt: %+v, %v; want its logs' location", last, ok)
	}
	if TailLog("short") != "short" {
		t.Error("a short log is kept whole")
	}

	beat, err := Heartbeat(running, "L", now, cfg)
	if err != nil || beat.Logged("x").Ended != nil {
		t.Errorf("a heartbeat with a log: Ended = %+v, %v; want none", beat.Logged("x").Ended, err)
	}

	enq := inStatus(StatusEnqueued)
	enq.LogLocation = running.LogLocation
	again, err := Claim(enq, "L2", now, cfg)
	if err != nil || again.LogLocation != nil {
		t.Errorf("a new claim: LogLocation = %+v, %v; want none until its claimer names one", again.LogLocation, err)
	}
}
