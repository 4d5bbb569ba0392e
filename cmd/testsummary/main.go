// Command testsummary reads `go test -json` on stdin, prints failures as they happen, and ends
// with the failed tests' own messages and how many tests ran, passed, failed and were skipped.
// It exits non-zero if any failed, or if a package failed to build.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	counts := map[string]int{}
	ranIn := map[string]int{}       // tests run per package, subtests included
	output := map[string][]string{} // per test, kept to print failures
	var skipped, failures []string
	badPackages := 0
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Println(sc.Text()) // build errors come as plain text
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			output[key] = append(output[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				switch e.Action {
				case "fail":
					badPackages++
					fmt.Printf("FAIL package %s\n%s", e.Package, strings.Join(output[key], ""))
				case "skip":
					fmt.Printf("     %s (no test files)\n", e.Package)
				default:
					fmt.Printf("ok   %s (%d tests)\n", e.Package, ranIn[e.Package])
				}
				continue
			}
			counts[e.Action]++
			if e.Action != "skip" {
				ranIn[e.Package]++
			}
			switch e.Action {
			case "fail":
				fmt.Printf("--- FAIL %s\n%s", key, strings.Join(output[key], ""))
				failures = append(failures, "--- FAIL "+key+"\n"+strings.Join(messages(output[key]), ""))
			case "skip":
				skipped = append(skipped, key)
			}
			delete(output, key)
		}
	}
	sort.Strings(skipped)
	for _, s := range skipped {
		fmt.Println("skipped:", s)
	}
	// Again at the end, without the logs a test prints on failure (a child process's last lines,
	// say): a reader of the end of the output sees what failed and why.
	for _, f := range failures {
		fmt.Print(f)
	}
	ran := counts["pass"] + counts["fail"]
	fmt.Printf("\ntests: %d ran, %d passed, %d failed, %d skipped\n", ran, counts["pass"], counts["fail"], counts["skip"])
	if counts["fail"] > 0 || badPackages > 0 || ran == 0 {
		os.Exit(1)
	}
}

// assertion is a test's own message (file_test.go:12: ...), and logLine one that relays a log
// (its lines carry "| time=").
var (
	assertion = regexp.MustCompile(`^\s+\w+\.go:\d+: `)
	logLine   = regexp.MustCompile(`\| time=`)
)

// messages returns the lines of a failed test's output that are its own messages, at most 20.
func messages(lines []string) []string {
	var own []string
	for i, l := range lines {
		if assertion.MatchString(l) && !logLine.MatchString(l) {
			own = append(own, l)
			// A message's continuation lines are indented deeper and follow it.
			for _, c := range lines[i+1:] {
				if !strings.HasPrefix(c, "        ") || assertion.MatchString(c) {
					break
				}
				own = append(own, c)
			}
		}
	}
	return own[:min(len(own), 20)]
}
