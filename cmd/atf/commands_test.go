package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// runCLI runs the CLI in this process, with no token nor endpoint from the environment.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("ATF_TOKEN", "")
	t.Setenv("ATF_ENDPOINT", "")
	var out bytes.Buffer
	err := run(args, &out)
	return out.String(), err
}

// TestFlagsBeforeCommand: the client flags may come before the command, as in atf --json
// lambdas, in either form; another flag there is refused, naming it.
func TestFlagsBeforeCommand(t *testing.T) {
	endpoint := testAPI(t)
	for _, args := range [][]string{
		{"--json", "--endpoint", endpoint, "lambdas"},
		{"--endpoint=" + endpoint, "-json", "lambdas"},
		{"--json", "lambdas", "--endpoint", endpoint},
	} {
		out, err := runCLI(t, args...)
		var lambdas []task.LambdaInfo
		if err != nil || json.Unmarshal([]byte(out), &lambdas) != nil || len(lambdas) != 2 || lambdas[0].Name != "echo" {
			t.Errorf("atf %v: %v\n%s", args, err, out)
		}
	}
	if _, err := runCLI(t, "--wait", "1s", "get", "echo", "a"); err == nil || !strings.Contains(err.Error(), "--wait") {
		t.Errorf("a command's own flag before the command: %v, want an error naming it", err)
	}
}

// TestVersion: atf version prints atf's module version and the revision it was built from.
func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version")
	if err != nil || !strings.HasPrefix(out, "atf ") {
		t.Fatalf("atf version: %v\n%s", err, out)
	}
	out, err = runCLI(t, "--json", "version")
	var v versionInfo
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || v.Go == "" {
		t.Fatalf("atf --json version: %v\n%s", err, out)
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/openatf/atf", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-11-27T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionOf(info).String(), "atf v0.4.0, revision 0123abc of 2026-11-27T10:00:00Z with local changes, built with go1.26.0"; got != want {
		t.Errorf("version of a build:\n%s\nwant\n%s", got, want)
	}
}

// TestPayloadFromFile: --payload @FILE sends the file's JSON, @- standard input's; a file that is
// not JSON is refused before anything is sent.
func TestPayloadFromFile(t *testing.T) {
	endpoint := testAPI(t)
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte("{\"text\": \"from a file\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "schedule", "echo", "--id", "f1", "--delay", "1h", "--payload", "@"+file, "--endpoint", endpoint); err != nil {
		t.Fatal(err)
	}
	stdin = strings.NewReader(`{"text": "from stdin"}`)
	t.Cleanup(func() { stdin = os.Stdin })
	if _, err := runCLI(t, "schedule", "echo", "--id", "f2", "--delay", "1h", "--payload", "@-", "--endpoint", endpoint); err != nil {
		t.Fatal(err)
	}
	c := &client.Client{Endpoint: endpoint}
	for id, want := range map[string]string{"f1": `{"text":"from a file"}`, "f2": `{"text":"from stdin"}`} {
		tk, err := c.Get(t.Context(), "echo", id)
		if err != nil || string(tk.Payload) != want {
			t.Errorf("task %s: payload %s (%v), want %s", id, tk.Payload, err, want)
		}
	}
	os.WriteFile(file, []byte("not json"), 0o644)
	if _, err := runCLI(t, "schedule", "echo", "--id", "f3", "--payload", "@"+file, "--endpoint", endpoint); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("a file that is not JSON: %v", err)
	}
	if _, err := runCLI(t, "schedule", "echo", "--id", "f3", "--payload", "@"+file+".missing", "--endpoint", endpoint); err == nil {
		t.Error("a missing file was taken")
	}
}

// TestTaskAsLambdaSlashID: the task commands take LAMBDA/ID where they take LAMBDA ID.
func TestTaskAsLambdaSlashID(t *testing.T) {
	endpoint := testAPI(t)
	for _, id := range []string{"w1", "w2"} {
		if _, err := runCLI(t, "schedule", "echo", "--id", id, "--delay", "1h", "--endpoint", endpoint); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCLI(t, "get", "echo/w1", "--json", "--endpoint", endpoint)
	if err != nil || !strings.Contains(out, `"id": "w1"`) {
		t.Fatalf("get echo/w1: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "after", "echo/w2", "echo/w1", "--json", "--endpoint", endpoint); err != nil || !strings.Contains(out, `"status": "pending"`) {
		t.Fatalf("after echo/w2 echo/w1: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "cancel", "echo/w2", "--json", "--endpoint", endpoint); err != nil || !strings.Contains(out, `"status": "cancelled"`) {
		t.Fatalf("cancel echo/w2: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "get", "/w1", "--endpoint", endpoint); err == nil || !strings.Contains(err.Error(), "LAMBDA/ID") {
		t.Errorf("get /w1: %v, want an error naming LAMBDA/ID", err)
	}
}
