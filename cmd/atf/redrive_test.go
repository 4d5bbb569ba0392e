package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/client"
)

// TestCLIRedrive: atf list shows the dead letters by both failed statuses; atf redrive takes one
// task, or a filter, or --all, with progress, and refuses to guess which.
func TestCLIRedrive(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t))
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(atfBin, append(args, "--endpoint", dev.client.Endpoint)...).CombinedOutput()
		return string(out), err
	}
	for _, id := range []string{"f1", "f2", "f3"} {
		if _, _, err := dev.client.Schedule(t.Context(), "fail", client.ScheduleRequest{ID: id, Collection: "c" + id[1:]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"f1", "f2", "f3"} {
		waitTerminal(t, dev.client, "fail", id)
	}
	if out, err := cli("list", "fail", "--status", "dead,fatal_failure"); err != nil || strings.Count(out, "fatal_failure") != 3 {
		t.Fatalf("list of failed tasks: %v\n%s", err, out)
	}
	if out, err := cli("redrive", "fail"); err == nil || !strings.Contains(out, "--all") {
		t.Fatalf("redrive without an id or filters: want an error naming --all, got %v\n%s", err, out)
	}
	if out, err := cli("redrive", "fail", "f1", "--max-attempts", "2"); err != nil || !regexp.MustCompile(`f1\s+(new|enqueued)\s+attempts 0 of 2`).MatchString(out) {
		t.Fatalf("redrive f1: %v\n%s", err, out)
	}
	if out, err := cli("redrive", "fail", "--collection", "c2"); err != nil || !regexp.MustCompile(`redriven:\s+1`).MatchString(out) || !strings.Contains(out, "page 1: redriven 1, skipped 0") {
		t.Fatalf("redrive of collection c2: %v\n%s", err, out)
	}
	out, err := cli("redrive", "fail", "--all", "--json")
	if err != nil || !strings.Contains(out, `"redriven": `) {
		t.Fatalf("redrive --all: %v\n%s", err, out)
	}
	// f3 at least was still failed; f1 and f2 too if their second lives ended already.
	if !regexp.MustCompile(`"redriven": [1-3]`).MatchString(out) {
		t.Errorf("redrive --all: %s", out)
	}
	if out, err := cli("redrive", "fail", "f1", "--all"); err == nil || !strings.Contains(out, "not both") {
		t.Fatalf("redrive of an id with --all: want an error, got %v\n%s", err, out)
	}
}
