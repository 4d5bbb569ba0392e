package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/client"
)

// TestCLIRedrive: atf list shows the dead letters by both failed statuses, and atf failed those of
// every lambda, with their lambda, a page at a time; atf redrive takes one
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
	// atf failed: the same across lambdas, each row naming its lambda, a page at a time.
	if out, err := cli("failed"); err != nil || !regexp.MustCompile(`(?m)^LAMBDA\s+ID\s+STATUS`).MatchString(out) ||
		len(regexp.MustCompile(`(?m)^fail\s+f[123]\s+fatal_failure\s`).FindAllString(out, -1)) != 3 {
		t.Fatalf("atf failed: %v\n%s", err, out)
	}
	if out, err := cli("failed", "--limit", "2"); err != nil || strings.Count(out, "fatal_failure") != 2 || !strings.Contains(out, "more: atf failed --cursor ") {
		t.Fatalf("atf failed --limit 2: %v\n%s", err, out)
	}
	if out, err := cli("failed", "--status", "success"); err == nil || !strings.Contains(out, "failed for good") {
		t.Fatalf("atf failed --status success: want an error, got %v\n%s", err, out)
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
