package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// GrownRun is the burn-down on a store that already holds many finished tasks, as a store does
// after a month of work, next to the same burn-down on empty stores: the due sweep and the claim
// must not slow down with the finished tasks.
type GrownRun struct {
	Finished    int     `json:"finished_tasks"` // in the table before the first round
	FillS       float64 `json:"fill_s"`         // how long writing them took (outside the clock)
	Rounds      int     `json:"rounds"`         // pairs of burn-downs, empty then grown
	Tasks       int     `json:"tasks"`          // per store, over all rounds
	Concurrency int     `json:"concurrency"`
	// TasksPerS and EmptyTasksPerS are the tasks over the seconds of all rounds' burn-downs on
	// the grown store and on the empty ones; Ratio is the first over the second.
	TasksPerS      float64 `json:"tasks_per_s"`
	EmptyTasksPerS float64 `json:"empty_tasks_per_s"`
	Ratio          float64 `json:"ratio_to_empty"`
}

// grownRounds is how many pairs of burn-downs the grown part runs. Pairs that alternate, each of
// a share of the tasks, see the same load from whatever else shares the machine, on average:
// one run of each, minutes apart, measured that load rather than the store (0.7 × and 1.8 × in
// two runs on the same code).
const grownRounds = 4

// grownStore is a SQLite file filled with finished tasks, for the grown burn-down.
type grownStore struct {
	dir, db  string
	finished int
	fill     time.Duration
}

// fillGrown writes a new SQLite file holding finished tasks. main fills it before the empty
// table's burn-down and runs the grown one right after that, so that the two run back to back,
// under the same load from whatever else shares the machine.
func fillGrown(ctx context.Context, finished int) (*grownStore, error) {
	dir, err := os.MkdirTemp("", "atf-bench-grown-")
	if err != nil {
		return nil, err
	}
	g := &grownStore{dir: dir, db: filepath.Join(dir, "atf.db"), finished: finished}
	start := time.Now()
	if err := fillFinished(ctx, g.db, finished); err != nil {
		g.remove()
		return nil, fmt.Errorf("fill: %w", err)
	}
	g.fill = time.Since(start)
	log.Printf("grown store: %d finished tasks written in %.0f s", finished, g.fill.Seconds())
	return g, nil
}

// compare burns down n tasks in grownRounds pairs: a share on a new empty store, then a share on
// the grown one.
func (g *grownStore) compare(ctx context.Context, n, concurrency int) (GrownRun, error) {
	share := max(1, n/grownRounds)
	run := GrownRun{Finished: g.finished, FillS: g.fill.Seconds(), Rounds: grownRounds, Concurrency: concurrency}
	var emptyS, grownS float64
	for round := range grownRounds {
		empty, err := embeddedThroughput(ctx, share, concurrency)
		if err != nil {
			return GrownRun{}, fmt.Errorf("round %d, empty store: %w", round, err)
		}
		grown, err := burnDown(ctx, g.db, share, concurrency)
		if err != nil {
			return GrownRun{}, fmt.Errorf("round %d, grown store: %w", round, err)
		}
		log.Printf("grown store: round %d: %.0f tasks/s empty, %.0f grown", round, empty.TasksPerS, grown.TasksPerS)
		emptyS, grownS = emptyS+empty.TotalS, grownS+grown.TotalS
		run.Tasks += share
	}
	run.TasksPerS, run.EmptyTasksPerS = float64(run.Tasks)/grownS, float64(run.Tasks)/emptyS
	run.Ratio = run.TasksPerS / run.EmptyTasksPerS
	return run, nil
}

func (g *grownStore) remove() { _ = os.RemoveAll(g.dir) } // a temporary directory: best effort

// fillFinished writes n succeeded tasks of the benchmark's lambda into the file at path, in
// batches from a few goroutines so that the store's group commit takes many at once. They ended
// just now: the retention, 30 days, prunes none of them during the run.
func fillFinished(ctx context.Context, path string, n int) error {
	s, err := sqlitestore.Open(path)
	if err != nil {
		return err
	}
	defer s.Close()
	l := task.Lambda{Name: lambdaName}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	batches := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for size := range batches {
				now := time.Now().UTC()
				b := make([]task.Task, size)
				for i := range b {
					t, err := task.New(task.Spec{}, l, now, cfg)
					if err != nil {
						errs <- err
						return
					}
					t.Status, t.NextTriggerAt, t.Attempts, t.Version = task.StatusSuccess, nil, 1, 4
					b[i] = t
				}
				if err := s.CreateBatch(ctx, b); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	var fillErr error
feed:
	for left := n; left > 0; left -= task.MaxBatch {
		select {
		case batches <- min(left, task.MaxBatch):
		case fillErr = <-errs:
			break feed
		}
	}
	close(batches)
	wg.Wait()
	if fillErr == nil {
		select {
		case fillErr = <-errs:
		default:
		}
	}
	return fillErr
}

// resetPeakRSS starts a new peak of this process's resident memory (VmHWM): writing 5 to
// /proc/self/clear_refs sets it to the current resident size (Linux 4.0 on).
func resetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSSMB reads this process's peak resident memory since the last resetPeakRSS, in MiB.
func peakRSSMB() (float64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f kB", &kb); err != nil {
				return 0, fmt.Errorf("VmHWM: %w", err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
