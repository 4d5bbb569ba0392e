package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion: the bash script completes commands, a command's flags (dev's from its own flag
// set) and the lambdas of the API at $ATF_ENDPOINT, run in bash itself. The zsh and fish scripts
// hold every command and flag (their shells are not installed here to run them).
func TestCompletion(t *testing.T) {
	script := func(shell string) string {
		var out bytes.Buffer
		if err := run([]string{"completion", shell}, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	file := filepath.Join(t.TempDir(), "atf.bash")
	os.WriteFile(file, []byte(script("bash")), 0o644)
	complete := func(words ...string) string {
		t.Helper()
		sh := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _atf; echo "${COMPREPLY[*]}"`
		cmd := exec.Command("bash", append([]string{"-c", sh, "bash", file}, words...)...)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(atfBin)+":"+os.Getenv("PATH"), "ATF_ENDPOINT="+testAPI(t))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"atf", "sched"}, "schedule schedules"},
		{[]string{"atf", "dev", "--ev"}, "--event-bus --events"},
		{[]string{"atf", "schedule", "--fi"}, "--file"},
		{[]string{"atf", "tail", "--n"}, "--now"},
		{[]string{"atf", "get", "ec"}, "echo"}, // from the API
		{[]string{"atf", "completion", "z"}, "zsh"},
	} {
		if got := complete(tc.words...); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.words, got, tc.want)
		}
	}
	zsh, fish := script("zsh"), script("fish")
	for _, c := range completionCommands() {
		for _, s := range []string{zsh, fish} {
			if !strings.Contains(s, c.name) {
				t.Errorf("a script lacks command %s", c.name)
			}
		}
		for _, f := range c.flags {
			if !strings.Contains(zsh, "--"+f) || !strings.Contains(fish, "from "+c.name+"' -l "+f+"\n") {
				t.Errorf("a script lacks %s --%s", c.name, f)
			}
		}
	}
	if err := run([]string{"completion", "tcsh"}, &bytes.Buffer{}); err == nil {
		t.Error("completion of an unknown shell")
	}
}
