package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// testAPI serves the API on a fresh embedded store, with the lambdas echo and other.
func testAPI(t *testing.T) string {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults(), task.Lambda{Name: "other"}.WithDefaults()}})
	srv := httptest.NewServer(httpapi.New(svc, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestScheduleFile: atf schedule --file sends 250 good lines in batches of up to 100 and creates
// them; the bad lines (not JSON, an unknown field, an unknown lambda, an id reused with another
// body, no lambda at all) fail by line number while the good lines of their batch are created;
// sent again, the file's tasks are replayed.
func TestScheduleFile(t *testing.T) {
	endpoint := testAPI(t)
	var lines []string
	for i := range 250 {
		lines = append(lines, fmt.Sprintf(`{"id":"t%d","payload":{"n":%d}}`, i, i))
	}
	bad := map[int]string{ // line number: the line
		7:   `{"id": "broken"`,
		120: `{"id":"x","colour":"red"}`,
		130: `{"id":"y","lambda":"nope"}`,
		140: `{"id":"t3","payload":{"n":"another body"}}`,
	}
	for _, n := range slices.Sorted(maps.Keys(bad)) { // each at its line number
		lines = slices.Insert(lines, n-1, bad[n])
	}
	lines = append(lines, "", `{"id":"o1","lambda":"other"}`)
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var progressLog bytes.Buffer
	progressOut = &progressLog
	t.Cleanup(func() { progressOut = os.Stderr })

	var out bytes.Buffer
	err := run([]string{"schedule", "echo", "--file", file, "--endpoint", endpoint, "--json"}, &out)
	if err == nil || !strings.Contains(err.Error(), "4 of the file's tasks failed") {
		t.Fatalf("err = %v, want 4 failed", err)
	}
	var sum fileSummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if sum.Created != 251 || sum.Replayed != 0 || sum.Failed != 4 || sum.Lines != len(lines) {
		t.Fatalf("summary %+v, want 251 created, 4 failed of %d lines", sum, len(lines))
	}
	for _, f := range sum.Failures {
		if bad[f.Line] == "" {
			t.Errorf("line %d failed (%s), a good line", f.Line, f.Error)
		}
		delete(bad, f.Line)
	}
	if len(bad) > 0 {
		t.Errorf("bad lines not reported: %v", bad)
	}
	if !strings.Contains(progressLog.String(), "lines 101 of 256: 100 created") || !strings.Contains(progressLog.String(), "of 256: 251 created") {
		t.Errorf("progress, not on a terminal, is a line a batch:\n%s", progressLog.String())
	}

	// Again, without --json and without the default lambda: the good lines are replayed, and
	// those that named no lambda fail.
	out.Reset()
	err = run([]string{"schedule", "--file", file, "--endpoint", endpoint}, &out)
	if err == nil {
		t.Fatal("lines without a lambda did not fail")
	}
	if !regexp.MustCompile(`created: +0\nreplayed: +1\nfailed: +254\n +line 1: +no lambda`).MatchString(out.String()) {
		t.Errorf("summary:\n%s", out.String())
	}
	out.Reset()
	err = run([]string{"schedule", "echo", "--file", file, "--endpoint", endpoint}, &out)
	if err == nil || !regexp.MustCompile(`created: +0\nreplayed: +251\nfailed: +4\n +line 7: `).MatchString(out.String()) {
		t.Errorf("again: %v\n%s", err, out.String())
	}
}

// TestScheduleFileStops: an error that is not a line's (no API there) stops the command after
// its first batch, and says so.
func TestScheduleFileStops(t *testing.T) {
	srv := httptest.NewServer(nil)
	srv.Close()
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	os.WriteFile(file, []byte(strings.Repeat(`{"id":"a"}`+"\n", 150)), 0o644)
	progressOut = &bytes.Buffer{}
	t.Cleanup(func() { progressOut = os.Stderr })
	var out bytes.Buffer
	err := run([]string{"schedule", "echo", "--file", file, "--endpoint", srv.URL, "--json"}, &out)
	var sum fileSummary
	if jerr := json.Unmarshal(out.Bytes(), &sum); jerr != nil {
		t.Fatalf("%v:\n%s", jerr, out.String())
	}
	if err == nil || sum.Stopped == "" || sum.Failed != 100 || sum.Lines != 101 {
		t.Fatalf("err %v, summary %+v: want stopped after the first batch", err, sum)
	}
}

// TestReadLine: a line over the limit comes back cut and marked; the next line is read whole.
func TestReadLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "long.jsonl")
	os.WriteFile(file, []byte(strings.Repeat("x", 200<<10)+"\n"+`{"id":"a"}`), 0o644)
	f, _ := os.Open(file)
	defer f.Close()
	if n, _ := countLines(f); n != 2 {
		t.Errorf("countLines = %d, want 2", n)
	}
	f.Seek(0, 0)
	r := bufioReader(f)
	if _, long, err := readLine(r, 100<<10); !long || err != nil {
		t.Fatalf("long line: tooLong %v, err %v", long, err)
	}
	if line, long, err := readLine(r, 100<<10); long || err != nil || string(line) != `{"id":"a"}` {
		t.Fatalf("next line %q, %v, %v", line, long, err)
	}
}

func bufioReader(f *os.File) *bufio.Reader { return bufio.NewReaderSize(f, 4096) }
