package main

// Chaos scenarios of the guarantees (see shared/testkit/history): processes killed while tasks run.
// Short versions run in `make test`; `make chaos` runs them long (ATF_CHAOS_TASKS).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/testkit/history"
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

// chaosSeed is ATF_CHAOS_SEED, to replay a failed run's random graph, or a new seed.
func chaosSeed(t *testing.T) uint64 {
	if v := os.Getenv("ATF_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ATF_CHAOS_SEED=%q: want a number", v)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// TestChaosKill is scenarios (a) and (g) on the embedded backend: atf dev, which runs the
// executors, is SIGKILLed every 200–800 ms while the tasks run, and started again on the same
// database. Every task must end in success, with no overlapping executions, no attempt run
// out of order, no terminal status changed and no task over its attempts. An atf dev that ends
// itself to abandon a handler (devProcess.abandoned) is one more crash; any other end fails.
func TestChaosKill(t *testing.T) {
	testChaosKill(t, "embedded", embedded(t), 1, chaosTasks(t, 2000), 0, 0)
}

// TestChaosKillKeyLimit is scenario (a) on the embedded backend with a key limit: the lambda
// runs 8 tasks at once, of 8 keys, at most one of each key at a time (key_concurrency 1), and
// atf dev is SIGKILLed as in TestChaosKill. Beyond its promises, no two runs of one key may
// overlap in the history, a killed run counting until its kill. 400 tasks, 4,000 under make
// chaos: a run of 8 at a time takes four times TestChaosKill's of 32.
func TestChaosKillKeyLimit(t *testing.T) {
	testChaosKill(t, "embedded, key_concurrency 1", embedded(t), 1, min(chaosTasks(t, 400), 4000), 0, 8)
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
		n, kills = 200, 40
	}
	testChaosKill(t, "aws", slices.Concat(onAWS(t), []string{"--enqueue-timeout", "5s"}), 2, n, kills, 0)
}

// testChaosKill runs n tasks of lambda rec on processes atf devs, killing them; with keys, the
// tasks have that many keys, which the lambda runs one at a time each (key_concurrency 1).
func testChaosKill(t *testing.T, name string, store []string, processes, n, maxKills, keys int) {
	handlers, hist := recordingHandlers(t, "rec.sh", recordScript)
	flags := []string{"--concurrency", "32", "--max-attempts", "100"}
	keyOf := func(id string) string { return "" }
	if keys > 0 {
		reg := filepath.Join(filepath.Dir(handlers), "lambdas.json")
		entry := `{"lambdas": [{"name": "rec", "handler": "rec", "concurrency": 8, "key_concurrency": 1, "max_attempts": 100}]}`
		if err := os.WriteFile(reg, []byte(entry), 0o644); err != nil {
			t.Fatal(err)
		}
		flags = append(flags, "--registry", reg)
		keyOf = func(id string) string { k, _, _ := strings.Cut(id, "-"); return k }
	}
	starts := 0
	started := map[string]*devProcess{} // by worker
	start := func() *devProcess {
		starts++
		t.Setenv("ATF_WORKER", strconv.Itoa(starts)) // the child inherits it
		d := startDev(t, handlers, store, flags...)
		started[strconv.Itoa(starts)] = d
		return d
	}
	devs := make([]*devProcess, processes)
	workers := make([]string, processes)
	for i := range devs {
		devs[i], workers[i] = start(), strconv.Itoa(starts)
	}

	// Schedule everything first, from 8 clients at once, behind a paused gate: the kills must
	// come while the tasks run, however slowly a loaded machine takes the schedules.
	if _, err := devs[0].client.SetGate(context.Background(), "rec", "", task.GatePause); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				ids[i] = fmt.Sprintf("c-%05d", i)
				if keys > 0 {
					ids[i] = fmt.Sprintf("k%d-%05d", i%keys, i)
				}
				if _, _, err := devs[0].client.Schedule(context.Background(), "rec", client.ScheduleRequest{ID: ids[i], Key: keyOf(ids[i])}); err != nil {
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
	if _, err := devs[0].client.SetGate(context.Background(), "rec", "", task.GateOpen); err != nil {
		t.Fatal(err)
	}

	var kills []history.Kill // and the processes that ended themselves (devProcess.abandoned)
	abandoned := 0
	var observed [][]history.Final
	// Generous: a loaded machine runs fewer tasks a second; the check below says what was lost.
	per := 30 * time.Millisecond
	if name == "aws" {
		per = 300 * time.Millisecond
	}
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*per)
	killsEnd := killWindow(deadline)
	lastList := time.Now()
	for {
		time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond)
		for i, d := range devs {
			if d.abandoned(0) {
				kills, abandoned = append(kills, history.Kill{Worker: workers[i], At: time.Now()}), abandoned+1
				devs[i], workers[i] = start(), strconv.Itoa(starts)
			} else if err := d.exited(); err != nil {
				t.Fatalf("%v, not killed by the test", err) // its log follows
			}
		}
		// Listing every task takes a while, so between kills only the counts are read; a full
		// listing, for the check that no terminal status changes, every few seconds.
		if done, err := finished(devs[0].client, name == "aws"); err == nil && done {
			break // every task was scheduled before the gate opened
		}
		if time.Since(lastList) > 5*time.Second {
			fs, err := chaostest.List(devs[0].client, "rec")
			if err != nil && !devs[0].abandoned(5*time.Second) {
				t.Fatalf("list: %v", err)
			} else if err == nil {
				observed, lastList = append(observed, fs), time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("tasks still running at the deadline, after %d kills", len(kills))
			break
		}
		if maxKills > 0 && len(kills) == maxKills || time.Now().After(killsEnd) {
			continue
		}
		i := rand.IntN(processes)
		kills = append(kills, history.Kill{Worker: workers[i], At: time.Now()})
		devs[i].stop(syscall.SIGKILL)
		devs[i], workers[i] = start(), strconv.Itoa(starts)
	}
	observed = append(observed, finals(t, devs[0].client, "rec"))
	for _, d := range devs {
		d.stop(syscall.SIGTERM)
	}

	execs := readHistory(t, hist, started)
	final := observed[len(observed)-1]
	r := history.Check(execs, kills, observed, final, task.StatusSuccess)
	extra := fmt.Sprintf(" abandoned=%d stopped=%d", abandoned, stopped(execs))
	var overLimit []string
	if keys > 0 {
		overLimit = history.OverLimit(execs, kills, keyOf, 1)
		extra += fmt.Sprintf(" keys=%d over_limit=%d", keys, len(overLimit))
	}
	chaostest.Report(t, "kill ("+name+")", r, extra)
	if r.Kills == 0 {
		t.Error("no process was killed")
	}
	if len(overLimit) > 0 {
		t.Errorf("runs of one key over its key_concurrency of 1 (%d): %q", len(overLimit), overLimit[:min(len(overLimit), 10)])
	}
}

// readHistory reads the handlers' history, and ends each run that wrote no end, of a process
// not killed, where that process logged that the run ended: a run its executor stopped (its
// lease lost, on a loaded machine) is SIGKILLed with its process group before the executor logs
// the stop, so it can have done nothing after that line. Without it, the check would take the
// run for one still going, overlapping every later attempt.
func readHistory(t *testing.T, hist string, started map[string]*devProcess) []history.Execution {
	t.Helper()
	execs, err := history.Read(hist)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		task    string
		attempt int
	}
	ends := map[string]map[run]time.Time{} // by worker
	for i, e := range execs {
		d := started[e.Worker]
		if !e.End.IsZero() || d == nil {
			continue
		}
		if ends[e.Worker] == nil {
			ends[e.Worker] = map[run]time.Time{}
			for _, m := range runEnded.FindAllStringSubmatch(d.log(), -1) {
				at, err := time.Parse(time.RFC3339Nano, m[1])
				attempt, _ := strconv.Atoi(m[3])
				r := run{m[2], attempt}
				if _, seen := ends[e.Worker][r]; err == nil && !seen {
					ends[e.Worker][r] = at
				}
			}
		}
		if at, ok := ends[e.Worker][run{e.Task, e.Attempt}]; ok {
			execs[i].End, execs[i].Outcome = at, "stopped"
		}
	}
	return execs
}

// stopped counts the runs readHistory ended from the log.
func stopped(execs []history.Execution) int {
	n := 0
	for _, e := range execs {
		if e.Outcome == "stopped" {
			n++
		}
	}
	return n
}

// runEnded is a line of atf dev's log saying that a run ended: the executor stopped its handler,
// or the handler returned.
var runEnded = regexp.MustCompile(`(?m)^time=(\S+) level=\w+ msg="(?:stopped handler: lease lost|task ran[^"]*)" lambda=\S+ task_id=(\S+) attempt=(\d+)`)

// killWindow is when a scenario that kills until every task is done stops killing: at the
// deadline's first half. Each restart costs a process start and the runs it cut short, so on a
// loaded machine kills every 200–800 ms could keep the tasks from ever finishing; the second
// half lets them finish, and the check then judges every run, killed or not.
func killWindow(deadline time.Time) time.Time {
	return time.Now().Add(time.Until(deadline) / 2)
}

// finals lists every task of lambda.
// finished reports whether every task of lambda rec is terminal. On DynamoDB it lists them: a
// process killed between a task's write and its counter's leaves the counts off (see
// docs/capacity.md), while the embedded store keeps them in the write's own transaction and
// they are far cheaper to read than a list of 20,000 tasks.
func finished(c *client.Client, list bool) (bool, error) {
	if !list {
		left, err := chaostest.Unfinished(c, "rec")
		return left == 0, err
	}
	fs, err := chaostest.List(c, "rec")
	if err != nil {
		return false, err
	}
	return !slices.ContainsFunc(fs, func(f history.Final) bool { return !f.Status.Terminal() }), nil
}

func finals(t *testing.T, c *client.Client, lambda string) []history.Final {
	t.Helper()
	fs, err := chaostest.List(c, lambda)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return fs
}

// recordingHandlers makes a folder holding one lambda, name, that runs script, and points the
// scripts' ATF_HISTORY at a history file beside it.
func recordingHandlers(t *testing.T, name, script string) (handlers, hist string) {
	dir := t.TempDir()
	handlers, hist = filepath.Join(dir, "handlers"), filepath.Join(dir, "history")
	os.Mkdir(handlers, 0o755)
	if err := os.WriteFile(filepath.Join(handlers, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ATF_HISTORY", hist)
	return handlers, hist
}

// slowScript is a lambda like recordScript that takes 2 s and returns who ran which attempt.
const slowScript = `#!/bin/sh
echo "start $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$" >> "$ATF_HISTORY"
sleep 2
echo "end $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$ success" >> "$ATF_HISTORY"
echo "{\"worker\":\"$ATF_WORKER\",\"attempt\":$ATF_ATTEMPT}"
`

// TestChaosStopAWS is scenario (b) with real processes, on DynamoDB and SQS: of two atf dev
// processes sharing the table and queues, A is SIGSTOPped with its handlers while they hold
// leases, for longer than the heartbeat timeout, then SIGCONTinued. B times A's tasks out and
// runs them again. For each task A lost: A's heartbeat is refused for a stale lease or its
// clock says the lease ran out, A stops the handler within 3 heartbeats, and B's result stands. (On the embedded store one process
// owns the database, so no other can take a lease over; TestChaosPause in shared/local freezes
// a worker in process there.)
func TestChaosStopAWS(t *testing.T) {
	n := 8
	if os.Getenv("ATF_CHAOS_TASKS") != "" {
		n = 16
	}
	handlers, hist := recordingHandlers(t, "slow.sh", slowScript)
	store := slices.Concat(onAWS(t), []string{"--enqueue-timeout", "5s"})
	t.Setenv("ATF_WORKER", "A")
	a := startDev(t, handlers, store, "--concurrency", "4")
	for i := range n {
		schedule(t, a.client, "slow", client.ScheduleRequest{ID: fmt.Sprintf("s-%03d", i)})
	}
	// B starts once A holds leases: tasks go to their queue as they are scheduled, and a B
	// already polling could take them all before A received any.
	for i := 0; !running(t, hist, "A") && i < 200; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	t.Setenv("ATF_WORKER", "B")
	b := startDev(t, handlers, store, "--concurrency", "8")

	var stops []history.Kill // when A was stopped
	var observed [][]history.Final
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if running(t, hist, "A") {
			pids := stopTree(a.cmd.Process.Pid)
			// Taken once all are stopped: a handler may write its start line as its parent stops.
			stops = append(stops, history.Kill{Worker: "A", At: time.Now()})
			time.Sleep(4 * time.Second) // the heartbeat timeout is 1.2 s
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		time.Sleep(500 * time.Millisecond)
		snapshot := finals(t, b.client, "slow")
		observed = append(observed, snapshot)
		if chaostest.Done(snapshot, n) || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(time.Second) // A's last words

	execs := readHistory(t, hist, map[string]*devProcess{"A": a, "B": b})
	latest := map[string]int{}
	for _, e := range execs {
		latest[e.Task] = max(latest[e.Task], e.Attempt)
	}
	logA := a.log()
	takenOver := 0
	for i, e := range execs {
		stopped := slices.ContainsFunc(stops, func(s history.Kill) bool {
			return e.Start.Before(s.At) && (e.End.IsZero() || e.End.After(s.At))
		})
		if e.Worker != "A" || e.Attempt == latest[e.Task] || !stopped {
			continue
		}
		takenOver++
		execs[i].Fenced = true
		said := linesAbout(logA, e.Task)
		// After SIGCONT, A learns it lost the lease from a refused heartbeat, or from its clock
		// when the lease's time is up first.
		if !strings.Contains(said, "the lease is no longer held") && !strings.Contains(said, "no heartbeat succeeded in time") {
			t.Errorf("%s: A lost attempt %d, but nothing of A's was refused for its stale lease, nor stopped by its clock:\n%s", e.Task, e.Attempt, said)
		}
		if !e.End.IsZero() && !strings.Contains(said, "could not record result") && !strings.Contains(said, "stopped handler: lease lost") {
			t.Errorf("%s: A's run of attempt %d ended and its result was not refused:\n%s", e.Task, e.Attempt, said)
		}
		if c := strings.Count(said, `msg="heartbeat failed"`); c > 3 {
			t.Errorf("%s: A ran on through %d failed heartbeats", e.Task, c)
		}
		tk, err := b.client.Get(context.Background(), "slow", e.Task)
		var res struct{ Worker string }
		if err != nil || json.Unmarshal(tk.Result, &res) != nil || res.Worker != "B" {
			t.Errorf("%s: %v; the result that stands is %s, want B's", e.Task, err, tk.Result)
		}
	}
	a.stop(syscall.SIGTERM)
	b.stop(syscall.SIGTERM)
	r := history.Check(execs, nil, observed, observed[len(observed)-1], task.StatusSuccess)
	r.Faults = len(stops)
	chaostest.Report(t, "stopped lease holder (aws)", r, fmt.Sprintf(" taken_over=%d", takenOver))
	if takenOver == 0 {
		t.Error("no lease of the stopped worker was taken over")
	}
}

// running reports whether worker has a run in the history that has not ended.
func running(t *testing.T, hist, worker string) bool {
	execs, err := history.Read(hist)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return slices.ContainsFunc(execs, func(e history.Execution) bool { return e.Worker == worker && e.End.IsZero() })
}

// stopTree SIGSTOPs pid, then its descendants, until none is left running (a child may have
// been forking as its parent stopped), and returns them all, parents first.
func stopTree(pid int) []int {
	syscall.Kill(pid, syscall.SIGSTOP)
	stopped := map[int]bool{pid: true}
	out := []int{pid}
	for more := true; more; {
		more = false
		for _, p := range tree(pid) {
			if !stopped[p] {
				syscall.Kill(p, syscall.SIGSTOP)
				stopped[p], more, out = true, true, append(out, p)
			}
		}
	}
	return out
}

// tree returns pid and its descendants, parents first.
func tree(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its last ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// linesAbout returns the lines of a log that name task id.
func linesAbout(log, id string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "task_id="+id+" ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dagScript is a lambda of the flow scenario, like recordScript, that also checks what it was
// given (its payload is a chaostest.FlowPayload, inside the envelope when it has upstreams):
// as many upstreams as the payload says, each ended, and under all_success each a success with
// its result. What is wrong goes to the file $ATF_HISTORY.wrong. A payload with "fail": true
// fails fatally.
const dagScript = `#!/bin/sh
echo "start $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$" >> "$ATF_HISTORY"
in=$(cat)
ups=$(printf '%s' "$in" | grep -o '"ups":[0-9]*' | head -n 1 | cut -d: -f2)
ended=$(printf '%s' "$in" | grep -oE '"status":"(success|fatal_failure|dead|cancelled|dropped|upstream_failed)"' | wc -l)
ok=$(printf '%s' "$in" | grep -o '"status":"success"' | wc -l)
results=$(printf '%s' "$in" | grep -o '"result":{"id":"dag-' | wc -l)
need=$((ok))
case "$in" in *'"all_done":true'*) need=$((ended)) ;; esac
if [ "$((${ups:-0}))" -gt 0 ] && [ "$ATF_ENVELOPE" != 1 ]; then
  echo "$ATF_TASK_ID attempt $ATF_ATTEMPT: no envelope" >> "$ATF_HISTORY.wrong"
fi
if [ "$need" -ne "$((${ups:-0}))" ] || [ "$((results))" -ne "$((ok))" ]; then
  echo "$ATF_TASK_ID attempt $ATF_ATTEMPT: $need of ${ups:-0} upstreams let it run, $((results)) results of $((ok)) successes: $in" >> "$ATF_HISTORY.wrong"
fi
sleep 0.0$(( $$ % 5 ))
case "$in" in *'"fail":true'*)
  echo "end $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$ error" >> "$ATF_HISTORY"
  echo "fails, as its payload says" >&2
  exit 1 ;;
esac
echo "end $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$ success" >> "$ATF_HISTORY"
echo "{\"id\":\"$ATF_TASK_ID\"}"
`

// TestChaosKillFlow is the flow scenario under SIGKILL on the embedded backend: a random layered
// DAG (chaostest.RandomDAG: 300 tasks, up to 5,000 under make chaos) over two lambdas, with
// fan-in and fan-out, some tasks all_done and a few failing fatally, runs while atf dev is
// SIGKILLed every 200–800 ms and started again on the same database. From the history: no task
// started before its upstreams had ended as its trigger rule wants (and each handler found its
// inputs so), no two runs of a task overlap, and every task ended as the graph says. An atf dev
// that ends itself to abandon a handler (devProcess.abandoned) is one more crash.
func TestChaosKillFlow(t *testing.T) {
	n := min(chaosTasks(t, 300), 5000)
	lambdas := []string{"dag1", "dag2"}
	seed := chaosSeed(t)
	t.Logf("seed %d (ATF_CHAOS_SEED replays its graph)", seed)
	dag := chaostest.RandomDAG(rand.New(rand.NewPCG(seed, 2)), n, lambdas)
	want := dag.Want()

	handlers, hist := recordingHandlers(t, lambdas[0], dagScript)
	if err := os.WriteFile(filepath.Join(handlers, lambdas[1]), []byte(dagScript), 0o755); err != nil {
		t.Fatal(err)
	}
	store := embedded(t)
	starts := 0
	started := map[string]*devProcess{} // by worker
	start := func() *devProcess {
		starts++
		t.Setenv("ATF_WORKER", strconv.Itoa(starts))
		d := startDev(t, handlers, store, "--concurrency", "32", "--max-attempts", "100")
		started[strconv.Itoa(starts)] = d
		return d
	}
	dev, worker := start(), "1"

	// Everything is scheduled behind paused gates, so that the kills come while the graph runs.
	for _, l := range lambdas {
		if _, err := dev.client.SetGate(context.Background(), l, "", task.GatePause); err != nil {
			t.Fatal(err)
		}
	}
	for _, batch := range dag.Batches(task.MaxBatch) {
		if _, _, err := dev.client.ScheduleBatch(context.Background(), lambdas[0], batch); err != nil {
			t.Fatalf("schedule %s...: %v", batch[0].ID, err)
		}
	}
	for _, l := range lambdas {
		if _, err := dev.client.SetGate(context.Background(), l, "", task.GateOpen); err != nil {
			t.Fatal(err)
		}
	}

	list := func() ([]history.Final, error) {
		var all []history.Final
		for _, l := range lambdas {
			fs, err := chaostest.List(dev.client, l)
			if err != nil {
				return nil, err
			}
			all = append(all, fs...)
		}
		return all, nil
	}
	var kills []history.Kill // and the processes that ended themselves (devProcess.abandoned)
	abandoned := 0
	var observed [][]history.Final
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*50*time.Millisecond)
	killsEnd := killWindow(deadline)
	lastList := time.Now()
	for {
		time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond)
		if dev.abandoned(0) {
			kills, abandoned = append(kills, history.Kill{Worker: worker, At: time.Now()}), abandoned+1
			dev, worker = start(), strconv.Itoa(starts)
		} else if err := dev.exited(); err != nil {
			t.Fatalf("%v, not killed by the test", err) // its log follows
		}
		left := 0
		for _, l := range lambdas {
			k, err := chaostest.Unfinished(dev.client, l)
			if err != nil {
				left = -1
				break
			}
			left += k
		}
		if left == 0 {
			break
		}
		if time.Since(lastList) > 5*time.Second {
			all, err := list()
			if err != nil && !dev.abandoned(5*time.Second) {
				t.Fatalf("list: %v", err)
			} else if err == nil {
				observed, lastList = append(observed, all), time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("tasks still running at the deadline, after %d kills", len(kills))
			break
		}
		if time.Now().After(killsEnd) {
			continue
		}
		kills = append(kills, history.Kill{Worker: worker, At: time.Now()})
		dev.stop(syscall.SIGKILL)
		dev, worker = start(), strconv.Itoa(starts)
	}
	all, err := list()
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	observed = append(observed, all)
	dev.stop(syscall.SIGTERM)

	execs := readHistory(t, hist, started)
	final := observed[len(observed)-1]
	r := history.CheckEach(execs, kills, observed, final, func(id string) task.Status { return want[id] })
	wrong := dag.Early(execs)
	if b, err := os.ReadFile(hist + ".wrong"); err == nil {
		wrong = append(wrong, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	ended := map[task.Status]int{}
	for _, s := range want {
		ended[s]++
	}
	chaostest.Report(t, "kill flow dag (embedded)", r, fmt.Sprintf(" abandoned=%d stopped=%d early=%d succeeded=%d failed=%d upstream_failed=%d",
		abandoned, stopped(execs), len(wrong), ended[task.StatusSuccess], ended[task.StatusFatalFailure], ended[task.StatusUpstreamFailed]))
	if len(wrong) > 0 {
		t.Errorf("runs let start before their upstreams allowed, or with wrong inputs: %v", wrong[:min(len(wrong), 10)])
	}
	if r.Kills == 0 || r.Tasks != n {
		t.Errorf("%d tasks of %d, %d kills", r.Tasks, n, r.Kills)
	}
}
