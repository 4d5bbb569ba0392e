package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/openatf/atf/shared/registry"
)

// atf new lambda NAME scaffolds a Go lambda as the example workers are laid out: its handler in
// functions/workers/NAME (built by make build-handlers for atf dev, and by make build for AWS),
// its entry in lambdas.json, sample tasks in events/workers/NAME, and a test of the handler on
// them that passes.

const newUsage = `  atf new lambda NAME [--dir .]
      scaffold a Go lambda in the repository at --dir: its handler (functions/workers/NAME),
      its entry in lambdas.json, sample tasks (events/workers/NAME/tasks.jsonl, for atf
      schedule --file) and a test of the handler on them
`

// scaffolded is what atf new made.
type scaffolded struct {
	Lambda string   `json:"lambda"`
	Files  []string `json:"files"` // created or changed, relative to the repository
}

func newCommand(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("atf new", flag.ContinueOnError)
	dir := fs.String("dir", ".", "the repository: the folder of lambdas.json")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "lambda" {
		return errors.New("new takes: lambda NAME")
	}
	s, err := scaffoldLambda(*dir, pos[1])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, s)
	}
	for _, f := range s.Files {
		fmt.Fprintln(out, f)
	}
	fmt.Fprintf(out, "next: go test ./functions/workers/%s, then make run and atf schedule %s --file events/workers/%s/tasks.jsonl\n", s.Lambda, s.Lambda, s.Lambda)
	return nil
}

func scaffoldLambda(dir, name string) (scaffolded, error) {
	regPath := filepath.Join(dir, registry.File)
	old, err := os.ReadFile(regPath)
	if err != nil {
		return scaffolded{}, fmt.Errorf("%w: run atf new in the repository, or give --dir", err)
	}
	reg, err := registry.Parse(old)
	if err != nil {
		return scaffolded{}, err
	}
	if _, taken := reg.Lambda(name); taken {
		return scaffolded{}, fmt.Errorf("lambda %q is in %s already", name, registry.File)
	}
	updated, err := addRegistryEntry(old, fmt.Sprintf(`{"name": %q, "timeout": "1m"}`, name))
	if err != nil {
		return scaffolded{}, err
	}
	if _, err := registry.Parse(updated); err != nil { // the name's rules, among others
		return scaffolded{}, err
	}
	handlerDir := filepath.Join("functions", "workers", name)
	eventsFile := filepath.Join("events", "workers", name, "tasks.jsonl")
	files := map[string]string{
		filepath.Join(handlerDir, "main.go"):      handlerTemplate,
		filepath.Join(handlerDir, "main_test.go"): handlerTestTemplate,
		eventsFile: `{"id": "` + name + `-1", "payload": {"name": "Ada"}}
{"id": "` + name + `-2", "payload": {"name": "Grace"}, "priority": "high"}
`,
	}
	for _, f := range []string{handlerDir, filepath.Dir(eventsFile)} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return scaffolded{}, fmt.Errorf("%s exists already", f)
		}
	}
	s := scaffolded{Lambda: name}
	for _, f := range []string{filepath.Join(handlerDir, "main.go"), filepath.Join(handlerDir, "main_test.go"), eventsFile} {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return s, err
		}
		body := strings.ReplaceAll(files[f], "NAME", name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return s, err
		}
		s.Files = append(s.Files, f)
	}
	if err := os.WriteFile(regPath, updated, 0o644); err != nil {
		return s, err
	}
	s.Files = append(s.Files, registry.File)
	return s, nil
}

// addRegistryEntry adds entry at the end of the registry's "lambdas" list, keeping the rest of
// the file as it is written.
func addRegistryEntry(reg []byte, entry string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(reg))
	depth, inLambdas := 0, false
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: no \"lambdas\" list found: %w", registry.File, err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			continue
		case json.Delim('}'), json.Delim(']'):
			depth--
			if inLambdas && depth == 1 {
				end := int(dec.InputOffset()) - 1 // the list's ']'
				before := bytes.TrimRight(reg[:end], " \t\r\n")
				var b bytes.Buffer
				b.Write(before)
				if before[len(before)-1] == '[' {
					b.WriteString("\n    " + entry + "\n  ")
				} else {
					b.WriteString(",\n    " + entry + "\n  ")
				}
				b.Write(reg[end:])
				return b.Bytes(), nil
			}
			continue
		}
		if key, ok := tok.(string); ok && depth == 1 && key == "lambdas" {
			inLambdas = true
		}
	}
}

const handlerTemplate = `// Command NAME is a lambda: payload {"name": "..."}, result {"greeting": "hello, ..."}. Build
// it and put the binary in an ` + "`atf dev --handlers`" + ` folder; ` + "`make run`" + ` does. Its settings are its
// entry in lambdas.json.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/openatf/atf/shared/worker"
	"github.com/openatf/atf/shared/workerfn"
)

func main() { workerfn.Main(worker.HandlerFunc(handle)) }

type input struct {
	Name string ` + "`json:\"name\"`" + `
}

type output struct {
	Greeting string ` + "`json:\"greeting\"`" + `
}

// handle runs one task. An error that wraps worker.ErrFatal (worker.Fatal) ends the task
// fatal_failure; any other is retried, up to the lambda's max attempts. Stop when ctx ends.
func handle(ctx context.Context, t worker.Task) (json.RawMessage, error) {
	var in input
	if err := json.Unmarshal(t.Payload, &in); err != nil || in.Name == "" {
		return nil, worker.Fatal(fmt.Errorf("payload must be {\"name\": \"...\"}, got %s", t.Payload))
	}
	return json.Marshal(output{Greeting: "hello, " + in.Name})
}
`

const handlerTestTemplate = `package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/openatf/atf/shared/worker"
)

// TestSamples: the handler succeeds on each sample task of events/workers/NAME.
func TestSamples(t *testing.T) {
	f, err := os.Open("../../../events/workers/NAME/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var sample struct {
			ID      string          ` + "`json:\"id\"`" + `
			Payload json.RawMessage ` + "`json:\"payload\"`" + `
		}
		if err := json.Unmarshal(sc.Bytes(), &sample); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		out, err := handle(t.Context(), worker.Task{ID: sample.ID, Payload: sample.Payload, Attempt: 1})
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		var got output
		if err := json.Unmarshal(out, &got); err != nil || got.Greeting == "" {
			t.Errorf("line %d: result %s", n, out)
		}
	}
}

// TestBadPayload: a payload the handler cannot read fails the task for good, not retried.
func TestBadPayload(t *testing.T) {
	_, err := handle(t.Context(), worker.Task{ID: "bad", Payload: json.RawMessage(` + "`[1, 2]`" + `), Attempt: 1})
	if !errors.Is(err, worker.ErrFatal) {
		t.Fatalf("err = %v, want a fatal error", err)
	}
}
`
