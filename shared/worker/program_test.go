package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/worker"
)

func script(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

var sample = worker.Task{ID: "t-1", Lambda: "send-email", Collection: "marketing", Priority: "high", Attempt: 2, Payload: []byte(`{"to":"a@b.c"}`)}

func TestProgramOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, result, errHas string
		retriable                  bool
	}{
		{name: "stdin to stdout", body: `cat`, result: `{"to":"a@b.c"}`},
		{name: "environment", body: `printf '["%s","%s","%s","%s","%s"]' "$ATF_TASK_ID" "$ATF_LAMBDA" "$ATF_ATTEMPT" "$ATF_COLLECTION" "$ATF_PRIORITY"`,
			result: `["t-1","send-email","2","marketing","high"]`},
		{name: "text result", body: `echo done`, result: `"done"`},
		{name: "no result", body: `true`, result: ``},
		{name: "retriable", body: `echo "busy, later" >&2; exit 75`, errHas: "busy, later", retriable: true},
		{name: "fatal", body: `echo "bad input" >&2; exit 3`, errHas: "bad input"},
		{name: "fatal without stderr", body: `exit 1`, errHas: "exit status 1"},
	} {
		// Written before any subtest runs a program: a file still open for writing in this
		// process when another goroutine forks is busy for exec (ETXTBSY) in the child.
		path := script(t, strings.ReplaceAll(tc.name, " ", "-"), tc.body)
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := worker.Program{Path: path}.Handle(context.Background(), sample)
			if tc.errHas == "" {
				if err != nil || string(res) != tc.result {
					t.Fatalf("got %s, %v; want %s", res, err, tc.result)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || worker.Retriable(err) != tc.retriable {
				t.Fatalf("got error %v (retriable %v); want one with %q, retriable %v", err, worker.Retriable(err), tc.errHas, tc.retriable)
			}
		})
	}
}

func TestProgramStderrTail(t *testing.T) {
	t.Parallel()
	_, err := worker.Program{Path: script(t, "h", `i=0; while [ $i -lt 2000 ]; do echo "noise line $i" >&2; i=$((i+1)); done; echo "the real reason" >&2; exit 1`)}.
		Handle(context.Background(), sample)
	if err == nil || !strings.HasSuffix(err.Error(), "the real reason") || len(err.Error()) > worker.StderrTail {
		t.Fatalf("error is %d bytes, want at most %d ending with the last line", len(err.Error()), worker.StderrTail)
	}
}

// A program that outlives its timeout is killed, with the children it started.
func TestProgramKilledOnTimeout(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	path := script(t, "h", `sleep 30 & echo $! > `+pidFile+`; wait`)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := worker.Program{Path: path}.Handle(ctx, sample)
	if err == nil || !strings.Contains(err.Error(), "timed out") || !worker.Retriable(err) {
		t.Fatalf("got %v, want a retriable timed-out error", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("returned after %s: the program was not killed", took)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	for range 50 { // the kill is sent; give the kernel a moment to reap
		if !alive(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("child %d still runs after its program was killed", pid)
}

// alive reports whether pid runs; a zombie (killed, not yet reaped by its new parent) does not.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}

func TestHandleDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"send-email.sh": 0o755, "resize": 0o755, "notes.txt": 0o644, ".hidden": 0o755} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	m := worker.NewMux()
	names, err := m.HandleDir(dir)
	if err != nil || strings.Join(names, ",") != "resize,send-email" {
		t.Fatalf("got %v, %v; want resize and send-email", names, err)
	}
	if _, ok := m.Handler("send-email"); !ok {
		t.Fatal("send-email not registered")
	}
	if err := os.WriteFile(filepath.Join(dir, "Bad Name"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.NewMux().HandleDir(dir); err == nil || !strings.Contains(err.Error(), "Bad Name") {
		t.Fatalf("invalid name: %v", err)
	}
	if _, err := worker.NewMux().HandleDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing folder: no error")
	}
}

func TestRunTurnsPanicIntoRetriableError(t *testing.T) {
	t.Parallel()
	_, err := worker.Run(context.Background(), worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
		panic("boom")
	}), sample)
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "goroutine") || !worker.Retriable(err) {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(worker.Fatal(errors.New("x")), worker.ErrFatal) || worker.Retriable(worker.Fatal(errors.New("x"))) {
		t.Fatal("Fatal does not mark an error fatal")
	}
}

// TestProgramWithoutAWSCredentials: a Program that runs without AWS credentials (as the ECS
// executor's handlers do) starts with none of the variables that carry or locate them, the
// container credentials endpoint included, and keeps the rest of the environment.
func TestProgramWithoutAWSCredentials(t *testing.T) {
	for _, name := range worker.CredentialVars {
		t.Setenv(name, "secret-"+name)
	}
	t.Setenv("AWS_REGION", "eu-west-1")
	h := script(t, "h", `env`)

	out, err := worker.Program{Path: h, WithoutAWSCredentials: true}.Handle(context.Background(), sample)
	if err != nil {
		t.Fatal(err)
	}
	var env string
	if err := json.Unmarshal(out, &env); err != nil {
		t.Fatal(err)
	}
	for _, name := range worker.CredentialVars {
		if strings.Contains(env, name+"=") {
			t.Errorf("the handler's environment has %s", name)
		}
	}
	for _, kept := range []string{"AWS_REGION=eu-west-1", "ATF_TASK_ID=t-1", "PATH="} {
		if !strings.Contains(env, kept) {
			t.Errorf("the handler's environment lacks %s", kept)
		}
	}

	// By default (atf dev's handlers) the environment is passed on whole.
	out, err = worker.Program{Path: h}.Handle(context.Background(), sample)
	if err != nil || !strings.Contains(string(out), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=") {
		t.Errorf("a default Program's environment lacks the credentials endpoint: %v", err)
	}
}
