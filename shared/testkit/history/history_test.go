package history

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h")
	lines := []string{
		"start " + nanos(at(0)) + " t1 1 w1 100",
		"start " + nanos(at(5)) + " t2 1 w1 101",
		"end " + nanos(at(10)) + " t1 1 w1 100 success",
	}
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Task != "t1" || !got[0].End.Equal(at(10)) || got[0].Outcome != "success" || !got[1].End.IsZero() {
		t.Fatalf("Read: %+v", got)
	}
	os.WriteFile(path, []byte("start 1 t1\n"), 0o644)
	if _, err := Read(path); err == nil {
		t.Error("Read of a malformed line: no error")
	}
}

func fenced(e Execution) Execution { e.Fenced = true; return e }

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func TestCheck(t *testing.T) {
	done := func(id string, attempts int) Final {
		return Final{ID: id, Status: task.StatusSuccess, Attempts: attempts, MaxAttempts: 3}
	}
	ex := func(id string, attempt int, worker string, start, end int) Execution {
		e := Execution{Task: id, Attempt: attempt, Worker: worker, Start: at(start), Outcome: "success"}
		if end >= 0 {
			e.End = at(end)
		}
		return e
	}
	for _, c := range []struct {
		name   string
		execs  []Execution
		kills  []Kill
		seen   [][]Final
		finals []Final
		check  func(Report) bool
	}{
		{"clean", []Execution{ex("a", 1, "w1", 0, 10), ex("b", 1, "w1", 0, 10)}, nil, nil,
			[]Final{done("a", 1), done("b", 1)}, func(r Report) bool { return r.OK() && r.Duplicates == 0 }},
		{"rerun after a kill", []Execution{ex("a", 1, "w1", 0, -1), ex("a", 2, "w2", 20, 30)}, []Kill{{"w1", at(15)}}, nil,
			[]Final{done("a", 2)}, func(r Report) bool { return r.OK() && r.Duplicates == 1 && r.Kills == 1 }},
		{"overlap with a killed worker", []Execution{ex("a", 1, "w1", 0, -1), ex("a", 2, "w2", 10, 30)}, []Kill{{"w1", at(15)}}, nil,
			[]Final{done("a", 2)}, func(r Report) bool { return len(r.Overlaps) == 1 }},
		{"overlap with a live worker", []Execution{ex("a", 1, "w1", 0, -1), ex("a", 2, "w2", 50, 60)}, nil, nil,
			[]Final{done("a", 2)}, func(r Report) bool { return len(r.Overlaps) == 1 }},
		{"fenced run left out", []Execution{fenced(ex("a", 1, "w1", 0, 40)), ex("a", 2, "w2", 10, 30)}, nil, nil,
			[]Final{done("a", 2)}, func(r Report) bool { return r.OK() && r.Duplicates == 1 }},
		{"backwards", []Execution{ex("a", 2, "w1", 0, 5), ex("a", 1, "w2", 10, 20)}, nil, nil,
			[]Final{done("a", 2)}, func(r Report) bool { return len(r.Backwards) == 1 }},
		{"released and rerun", []Execution{ex("a", 1, "w1", 0, 5), ex("a", 1, "w2", 10, 20)}, nil, nil,
			[]Final{done("a", 1)}, func(r Report) bool { return r.OK() }},
		{"lost", nil, nil, nil, []Final{{ID: "a", Status: task.StatusProcessing, MaxAttempts: 3}},
			func(r Report) bool { return len(r.Lost) == 1 }},
		{"terminal changed", nil, nil, [][]Final{{{ID: "a", Status: task.StatusCancelled}}}, []Final{done("a", 1)},
			func(r Report) bool { return len(r.Changed) == 1 }},
		{"over max", []Execution{ex("a", 4, "w1", 0, 5)}, nil, nil, []Final{done("a", 4)},
			func(r Report) bool { return len(r.OverMax) == 2 }},
	} {
		r := Check(c.execs, c.kills, c.seen, c.finals, task.StatusSuccess)
		if !c.check(r) {
			t.Errorf("%s: %s\n%+v", c.name, r.Summary(), r)
		}
	}
}

// TestOverLimit: runs of one group over the limit at once are found, a killed worker's run ends
// at its kill, a slot freed and taken at one instant is no overlap, and other groups and tasks
// outside any group do not count.
func TestOverLimit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	group := func(id string) string {
		if i := strings.IndexByte(id, '-'); i > 0 {
			return id[:i]
		}
		return ""
	}
	execs := []Execution{
		{Task: "a-1", Attempt: 1, Worker: "1", Start: at(0), End: at(2)},
		{Task: "a-2", Attempt: 1, Worker: "1", Start: at(2), End: at(3)}, // takes a-1's slot at once
		{Task: "a-3", Attempt: 1, Worker: "2", Start: at(4)},             // killed at 6
		{Task: "a-4", Attempt: 1, Worker: "1", Start: at(6), End: at(7)}, // after the kill
		{Task: "b-1", Attempt: 1, Worker: "1", Start: at(0), End: at(9)}, // another group
		{Task: "solo", Attempt: 1, Worker: "1", Start: at(0), End: at(9)},
	}
	kills := []Kill{{Worker: "2", At: at(6)}}
	if over := OverLimit(execs, kills, group, 1); len(over) != 0 {
		t.Errorf("within the limit: %q", over)
	}
	execs = append(execs, Execution{Task: "a-5", Attempt: 1, Worker: "1", Start: at(5), End: at(8)})
	over := OverLimit(execs, kills, group, 1)
	if len(over) != 2 || !strings.Contains(over[0], "a-4") && !strings.Contains(over[1], "a-4") {
		t.Errorf("a-5 runs beside a-3 (until its kill) and a-4: %q", over)
	}
	if over := OverLimit(execs, kills, group, 2); len(over) != 0 {
		t.Errorf("with a limit of 2: %q", over)
	}
}
