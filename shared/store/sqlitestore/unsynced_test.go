package sqlitestore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/store/storetest"
	"github.com/openatf/atf/shared/task"
)

// TestUnsyncedConformance: the view that does not sync its updates is a task.Store like any.
func TestUnsyncedConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) task.Store {
		s := open(t, filepath.Join(t.TempDir(), "atf.db"))
		t.Cleanup(func() { s.Close() })
		return s.Unsynced()
	}, storetest.KeepsLogs())
}

// TestUnsyncedLeavesOthersSynced: after an unsynced group, the writer's connection syncs again,
// so a write that does not go through the group writer (SetGate) is synced.
func TestUnsyncedLeavesOthersSynced(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	tasks, next := twoTasks(t, s)
	if err := s.Unsynced().Update(t.Context(), next[0], tasks[0].Version); err != nil {
		t.Fatal(err)
	}
	var level int
	if err := s.w.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != 2 { // FULL
		t.Errorf("the writer's connection after an unsynced update: synchronous = %d, want 2 (FULL)", level)
	}
}

// crashChildEnv makes the test binary the child of TestUnsyncedSurvivesKill: it writes until it
// is killed.
const crashChildEnv = "ATF_SQLITESTORE_CRASH_CHILD"

// TestUnsyncedSurvivesKill: an update acknowledged by the unsynced view survives a kill -9 of the
// process (what it may lose is the machine's power, not the process). A child process creates
// tasks (synced) and enqueues them through the view from many goroutines, printing each id once
// its update returned; the test kills it mid-stream and reopens the file: every task printed is
// enqueued, and every task the child created exists.
func TestUnsyncedSurvivesKill(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "atf.db")
	created, enqueued := map[string]bool{}, map[string]bool{}
	killChild(t, "TestUnsyncedSurvivesKill", crashChildEnv, path, func(line string) bool {
		what, id, _ := strings.Cut(line, " ")
		switch what {
		case "created":
			created[id] = true
		case "enqueued":
			enqueued[id] = true
		}
		return len(enqueued) >= 300
	})

	s := open(t, path)
	defer s.Close()
	for id := range created {
		got, err := s.Get(t.Context(), crashLambda, id)
		switch {
		case err != nil:
			t.Errorf("task %s, created before the kill: %v", id, err)
		case enqueued[id] && got.Status != task.StatusEnqueued:
			t.Errorf("task %s, enqueued before the kill: status %s", id, got.Status)
		}
	}
}

// killChild runs the test binary's test as a child, with env set to path, passes each line it
// prints to seen until seen reports enough, and kills it with SIGKILL (no deferred Close, no
// final sync). It fails t if the child stops printing before.
func killChild(t *testing.T, test, env, path string, seen func(line string) (enough bool)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	enough := false
	for !enough && lines.Scan() {
		enough = seen(lines.Text())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: its exit status says so
	if !enough {
		t.Fatalf("the child stopped printing before it was killed: %v", lines.Err())
	}
}

const crashLambda = "crash"

// crashChild creates batches of tasks and enqueues them through the unsynced view, 16 at once,
// printing what each write acknowledged, until it is killed.
func crashChild(path string) {
	s, err := Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	l := task.Lambda{Name: crashLambda}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	var mu sync.Mutex
	say := func(what, id string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(what, id) // unbuffered: the parent reads it at once
	}
	for b := 0; ; b++ {
		now := time.Now().UTC()
		batch := make([]task.Task, 16)
		for i := range batch {
			tk, err := task.New(task.Spec{ID: "t" + strconv.Itoa(b) + "-" + strconv.Itoa(i)}, l, now, cfg)
			if err != nil {
				panic(err)
			}
			batch[i] = tk
		}
		if err := s.CreateBatch(ctx, batch); err != nil {
			panic(err)
		}
		for _, tk := range batch {
			say("created", tk.ID)
		}
		var wg sync.WaitGroup
		for _, tk := range batch {
			wg.Go(func() {
				next, err := task.Enqueue(tk, now, cfg)
				if err == nil {
					err = s.Unsynced().Update(ctx, next, tk.Version)
				}
				if err != nil {
					panic(err)
				}
				say("enqueued", tk.ID)
			})
		}
		wg.Wait()
	}
}
