package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/testkit/history"
)

// cancelScript is recordScript taking 100 to 500 ms, so that many cancels find their task
// running. SIGTERM ends it (and its sleep) before it writes its end.
const cancelScript = `#!/bin/sh
echo "start $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$" >> "$ATF_HISTORY"
sleep 0.$(( $$ % 5 + 1 ))
echo "end $(date +%s%N) $ATF_TASK_ID $ATF_ATTEMPT $ATF_WORKER $$ success" >> "$ATF_HISTORY"
echo '{}'
`

// cancelLog is what the cancels of a run were answered, by task.
type cancelLog struct {
	mu       sync.Mutex
	accepted map[string]bool // answered 200: the task ends cancelled
	unknown  map[string]bool // no answer (the process was killed): accepted or not
	running  int             // accepted while the task ran (cancel_requested)
	refused  int             // answered 409: the task had ended
}

// TestChaosCancelKill: random cancels (1,000 under make chaos) while atf dev is SIGKILLed every
// 200–800 ms and started again, as in TestChaosKill. A cancel the API accepted ends its task
// cancelled, never success, whether the task was waiting, running, or running in a process that
// was killed; a task whose cancels were all refused (it had ended) ends success; none is lost, no
// terminal status changes, no two runs of a task overlap. A cancel whose answer was lost to a
// kill may have been accepted or not: its task ends success or cancelled.
func TestChaosCancelKill(t *testing.T) {
	n, cancels := 200, 100
	if chaosTasks(t, 0) > 0 {
		n, cancels = 2000, 1000
	}
	handlers, hist := recordingHandlers(t, "rec.sh", cancelScript)
	store := embedded(t)
	starts := 0
	start := func() *devProcess {
		starts++
		t.Setenv("ATF_WORKER", strconv.Itoa(starts)) // the child inherits it
		return startDev(t, handlers, store, "--concurrency", "32", "--max-attempts", "100")
	}
	dev, worker := start(), "1"
	var devMu sync.Mutex
	current := func() *client.Client { devMu.Lock(); defer devMu.Unlock(); return dev.client }

	// Scheduled behind a paused gate, so that the kills and cancels come while the tasks run.
	if _, err := dev.client.SetGate(context.Background(), "rec", "", task.GatePause); err != nil {
		t.Fatal(err)
	}
	ids := chaostest.ScheduleAll(t, dev.client, "rec", "x", n, client.ScheduleRequest{})
	if _, err := dev.client.SetGate(context.Background(), "rec", "", task.GateOpen); err != nil {
		t.Fatal(err)
	}

	log := &cancelLog{accepted: map[string]bool{}, unknown: map[string]bool{}}
	cancelled := make(chan struct{})
	go func() {
		defer close(cancelled)
		for i := range cancels {
			// Half the cancels go to a task seen running, so that many race a run.
			id := ids[rand.IntN(n)]
			if i%2 == 1 {
				if run, _, err := current().List(context.Background(), task.ListParams{Lambda: "rec", Status: task.StatusProcessing, Limit: 50}); err == nil && len(run) > 0 {
					id = run[rand.IntN(len(run))].ID
				}
			}
			var tk task.Task
			var err error
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				tk, err = current().Cancel(ctx, "rec", id)
				cancel()
				if !errors.Is(err, syscall.ECONNREFUSED) {
					break
				}
				time.Sleep(20 * time.Millisecond) // never sent: the process is starting again
			}
			var apiErr *client.Error
			log.mu.Lock()
			switch {
			case err == nil:
				log.accepted[id] = true
				if tk.CancelRequested {
					log.running++
				}
			case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
				log.refused++
			default:
				log.unknown[id] = true
				if len(log.unknown) <= 3 {
					t.Logf("cancel of %s: %v", id, err)
				}
			}
			log.mu.Unlock()
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		}
	}()

	var kills []history.Kill
	var observed [][]history.Final
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*30*time.Millisecond)
	lastList := time.Now()
	sent := false
	for {
		time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond)
		select {
		case <-cancelled:
			sent = true
		default:
		}
		if done, err := finished(current(), false); err == nil && done && sent {
			break
		}
		if time.Since(lastList) > 5*time.Second {
			observed, lastList = append(observed, finals(t, current(), "rec")), time.Now()
		}
		if time.Now().After(deadline) {
			t.Errorf("tasks still running at the deadline, after %d kills", len(kills))
			break
		}
		if sent {
			continue // the cancels are all answered: the rest finishes in peace
		}
		kills = append(kills, history.Kill{Worker: worker, At: time.Now()})
		dev.stop(syscall.SIGKILL)
		next := start()
		devMu.Lock()
		dev, worker = next, strconv.Itoa(starts)
		devMu.Unlock()
	}
	<-cancelled
	observed = append(observed, finals(t, current(), "rec"))
	dev.stop(syscall.SIGTERM)

	execs, err := history.Read(hist)
	if err != nil {
		t.Fatal(err)
	}
	final := observed[len(observed)-1]
	status := map[string]task.Status{}
	for _, f := range final {
		status[f.ID] = f.Status
	}
	r := history.CheckEach(execs, kills, observed, final, func(id string) task.Status {
		switch {
		case log.accepted[id]:
			return task.StatusCancelled // never success
		case log.unknown[id] && status[id] == task.StatusCancelled:
			return task.StatusCancelled
		}
		return task.StatusSuccess
	})
	chaostest.Report(t, "cancel kill (embedded)", r, fmt.Sprintf(" cancels=%d accepted=%d while_running=%d refused=%d unanswered=%d",
		cancels, len(log.accepted), log.running, log.refused, len(log.unknown)))
	if r.Tasks != n {
		t.Errorf("%d tasks listed, want %d", r.Tasks, n)
	}
	if r.Kills == 0 {
		t.Error("no process was killed")
	}
}
