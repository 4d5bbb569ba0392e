package main

// Chaos scenarios of the guarantees (see shared/history): processes killed while tasks run.
// Short versions run in `make test`; `make chaos` runs them long (ATF_CHAOS_TASKS).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/history"
	"github.com/openatf/atf/shared/task"
)

// recordScript is a lambda that writes its start and end to the history file, with its worker
// (ATF_WORKER: which start of atf dev ran it; pids repeat over a long run) and its pid, and takes
// 0 to 40 ms.
const recordScript = `#!/bin/sh
echo "start $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$" >> "$ATF_HISTORY"
sleep 0.0$(( $$ % 5 ))
echo "end $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$ success" >> "$ATF_HISTORY"
echo '{}'
`

func chaosTasks(t *testing.T, short int) int {
	if v := os.Getenv("ATF_CHAOS_TASKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ATF_CHAOS_TASKS=%q: want a positive number", v)
		}
		return n
	}
	return short
}

// TestChaosKill is scenarios (a) and (g) on the embedded backend: atf dev, which runs the
// executors, is SIGKILLed every 200–800 ms while the tasks run, and started again on the same
// database. Every task must end in success, with no overlapping executions, no attempt run
// out of order, no terminal status changed and no task over its attempts.
func TestChaosKill(t *testing.T) {
	testChaosKill(t, "embedded", embedded(t), 1, chaosTasks(t, 2000), 0)
}

// TestChaosKillAWS is scenario (a) on DynamoDB and SQS: two atf dev processes share the table
// and queues, and a random one of them is SIGKILLed and started again, every 200–800 ms, 10
// times (40 under make chaos). What a killed process held comes back through its timeouts: a
// message it had received but not claimed after its visibility timeout (30 s), and a task it
// enqueued but had not yet sent after the enqueue timeout (5 s here), so the kills stop
// before the end.
func TestChaosKillAWS(t *testing.T) {
	n, kills := 100, 10
	if os.Getenv("ATF_CHAOS_TASKS") != "" {
		n, kills = 400, 40
	}
	testChaosKill(t, "aws", slices.Concat(onAWS(t), []string{"--enqueue-timeout", "5s"}), 2, n, kills)
}

func testChaosKill(t *testing.T, name string, store []string, processes, n, maxKills int) {
	dir := t.TempDir()
	handlers, hist := filepath.Join(dir, "handlers"), filepath.Join(dir, "history")
	os.Mkdir(handlers, 0o755)
	if err := os.WriteFile(filepath.Join(handlers, "rec.sh"), []byte(recordScript), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ATF_HISTORY", hist)
	flags := []string{"--concurrency", "8", "--max-attempts", "100"}
	starts := 0
	start := func() *devProcess {
		starts++
		t.Setenv("ATF_WORKER", strconv.Itoa(starts)) // the child inherits it
		return startDev(t, handlers, store, flags...)
	}
	devs := make([]*devProcess, processes)
	workers := make([]string, processes)
	for i := range devs {
		devs[i], workers[i] = start(), strconv.Itoa(starts)
	}

	// Schedule everything first, from 8 clients at once.
	ids := make([]string, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				ids[i] = fmt.Sprintf("c-%05d", i)
				if _, _, err := devs[0].client.Schedule(context.Background(), "rec", client.ScheduleRequest{ID: ids[i]}); err != nil {
					t.Errorf("schedule %s: %v", ids[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	var kills []history.Kill
	var observed [][]history.Final
	// Generous: a loaded machine runs fewer tasks a second; the check below says what was lost.
	per := 30 * time.Millisecond
	if name == "aws" {
		per = 300 * time.Millisecond
	}
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*per)
	for {
		time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond)
		snapshot, done := finals(t, devs[0].client, n)
		observed = append(observed, snapshot)
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("tasks still running at the deadline, after %d kills", len(kills))
			break
		}
		if maxKills > 0 && len(kills) == maxKills {
			continue
		}
		i := rand.IntN(processes)
		kills = append(kills, history.Kill{Worker: workers[i], At: time.Now()})
		devs[i].stop(syscall.SIGKILL)
		devs[i], workers[i] = start(), strconv.Itoa(starts)
	}
	for _, d := range devs {
		d.stop(syscall.SIGTERM)
	}

	execs, err := history.Read(hist)
	if err != nil {
		t.Fatal(err)
	}
	final := observed[len(observed)-1]
	r := history.Check(execs, kills, observed, final, task.StatusSuccess)
	fmt.Printf("chaos kill (%s): %s\n", name, r.Summary())
	for _, v := range slices.Concat(r.Lost, r.Overlaps, r.Backwards, r.Changed, r.OverMax)[:min(10, len(r.Lost)+len(r.Overlaps)+len(r.Backwards)+len(r.Changed)+len(r.OverMax))] {
		fmt.Printf("chaos violation: %s\n", v)
	}
	if !r.OK() || r.Kills == 0 {
		t.Errorf("%s\nlost %v\noverlaps %v\nbackwards %v\nchanged %v\nover max %v", r.Summary(), r.Lost, r.Overlaps, r.Backwards, r.Changed, r.OverMax)
	}
}

// finals lists every task of the rec lambda and reports whether all are terminal.
func finals(t *testing.T, c *client.Client, n int) ([]history.Final, bool) {
	t.Helper()
	var out []history.Final
	p := task.ListParams{Lambda: "rec", Limit: task.MaxListLimit}
	for {
		tasks, next, err := c.List(context.Background(), p)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, tk := range tasks {
			out = append(out, history.Final{ID: tk.ID, Status: tk.Status, Attempts: tk.Attempts, MaxAttempts: tk.MaxAttempts})
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	done := len(out) == n
	for _, f := range out {
		done = done && f.Status.Terminal()
	}
	return out, done
}
