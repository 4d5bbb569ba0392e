package registry_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/task"
)

// TestDefaults: an entry with a name only gets every default.
func TestDefaults(t *testing.T) {
	t.Parallel()
	r, err := registry.Parse([]byte(`{"lambdas": [{"name": "mail"}, {"name": "batch", "kind": "ecs"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []registry.Entry{
		{
			Name: "mail", Team: "default", Stack: "default", Kind: registry.KindFunction, Handler: "mail", Priorities: task.DefaultPriorities,
			Timeout: task.DefaultHandlerTimeout, Concurrency: task.DefaultConcurrency,
			Function: &registry.Function{
				MemoryMB: registry.DefaultFunctionMemoryMB, BatchSize: task.DefaultConcurrency,
				MaxConcurrency: map[string]int{"high": 2, "normal": 2, "low": 2},
			},
		},
		{
			Name: "batch", Team: "default", Stack: "default", Kind: registry.KindECS, Handler: "batch", Priorities: task.DefaultPriorities,
			Timeout: task.DefaultHandlerTimeout, Concurrency: task.DefaultConcurrency,
			ECS: &registry.ECS{CPU: 256, MemoryMB: 512, Tasks: 1, Image: registry.DefaultECSImage},
		},
	}
	if !reflect.DeepEqual(r.Lambdas, want) {
		t.Errorf("got  %+v\nwant %+v", r.Lambdas, want)
	}
}

// TestBadEntries: every bad entry is refused with a message naming the entry and the field.
func TestBadEntries(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ json, want string }{
		"not JSON":          {`{"lambdas": [`, "registry: unexpected EOF"},
		"two values":        {`{"lambdas": [{"name": "a"}]} {}`, "more than one JSON value"},
		"no lambdas":        {`{"lambdas": []}`, `"lambdas" lists no lambda`},
		"unknown top field": {`{"lambda": []}`, `unknown field "lambda"`},
		"unknown field":     {`{"lambdas": [{"name": "a", "timout": "1m"}]}`, `unknown field "timout"`},
		"no name":           {`{"lambdas": [{"kind": "function"}]}`, "lambdas[0]: name is required"},
		"bad name":          {`{"lambdas": [{"name": "Send Email"}]}`, `lambdas[0] "Send Email": name "Send Email": use 1 to 64 of a-z`},
		"long name":         {`{"lambdas": [{"name": "` + strings.Repeat("a", 65) + `"}]}`, "use 1 to 64"},
		"duplicate":         {`{"lambdas": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}`, `lambdas[2] "a": name is also the name of lambdas[0]`},
		"bad handler":       {`{"lambdas": [{"name": "a", "handler": "../x"}]}`, `lambdas[0] "a": handler "../x"`},
		"bad kind":          {`{"lambdas": [{"name": "a", "kind": "ec2"}]}`, `lambdas[0] "a": kind "ec2": want "function" or "ecs"`},
		"empty priorities":  {`{"lambdas": [{"name": "a", "priorities": []}]}`, "priorities: list at least one"},
		"bad priority":      {`{"lambdas": [{"name": "a", "priorities": ["high", "Low"]}]}`, `lambdas[0] "a": priority "Low"`},
		"priority twice":    {`{"lambdas": [{"name": "a", "priorities": ["high", "high"]}]}`, `priority "high" is listed twice`},
		"bad timeout":       {`{"lambdas": [{"name": "a", "timeout": "5 minutes"}]}`, `timeout "5 minutes": want a Go duration`},
		"negative timeout":  {`{"lambdas": [{"name": "a", "timeout": "-1s"}]}`, "timeout must be positive, got -1s"},
		"zero concurrency":  {`{"lambdas": [{"name": "a", "concurrency": 0}]}`, "concurrency must be in 1..1000, got 0"},
		"max attempts":      {`{"lambdas": [{"name": "a", "max_attempts": 101}]}`, "max attempts must be in 0..100, got 101"},
		"max enqueued":      {`{"lambdas": [{"name": "a", "concurrency": 8, "max_enqueued": 4}]}`, "max enqueued must be zero (the default) or at least the concurrency 8, got 4"},
		"function too long": {`{"lambdas": [{"name": "a", "timeout": "15m"}]}`, `lambdas[0] "a": timeout 15m0s: a worker function runs at most 15m0s, with a margin: use kind "ecs"`},
		"function memory":   {`{"lambdas": [{"name": "a", "function": {"memory_mb": 64}}]}`, "function.memory_mb must be in 128..10240, got 64"},
		"batch over 10":     {`{"lambdas": [{"name": "a", "concurrency": 20, "function": {"batch_size": 11}}]}`, "function.batch_size must be in 1..10, got 11"},
		"batch over slots":  {`{"lambdas": [{"name": "a", "concurrency": 2, "function": {"batch_size": 3}}]}`, "function.batch_size 3 is over concurrency 2"},
		"unknown priority":  {`{"lambdas": [{"name": "a", "function": {"max_concurrency": {"urgent": 5}}}]}`, `function.max_concurrency: "urgent" is not one of the priorities`},
		"max concurrency 1": {`{"lambdas": [{"name": "a", "function": {"max_concurrency": {"low": 1}}}]}`, "function.max_concurrency.low must be in 2..1000 (AWS's bounds for an event source mapping), got 1"},
		"ecs on function":   {`{"lambdas": [{"name": "a", "ecs": {"cpu": 256}}]}`, `ecs: only for kind "ecs"`},
		"function on ecs":   {`{"lambdas": [{"name": "a", "kind": "ecs", "function": {}}]}`, `function: only for kind "function"`},
		"fargate cpu":       {`{"lambdas": [{"name": "a", "kind": "ecs", "ecs": {"cpu": 300}}]}`, "ecs.cpu 300: want one of [256 512 1024"},
		"fargate memory":    {`{"lambdas": [{"name": "a", "kind": "ecs", "ecs": {"cpu": 1024, "memory_mb": 1024}}]}`, "ecs.memory_mb 1024 does not go with ecs.cpu 1024: Fargate takes 2048..8192 in steps of 1024"},
		"fargate 256":       {`{"lambdas": [{"name": "a", "kind": "ecs", "ecs": {"cpu": 256, "memory_mb": 1536}}]}`, "ecs.memory_mb 1536 does not go with ecs.cpu 256"},
		"negative tasks":    {`{"lambdas": [{"name": "a", "kind": "ecs", "ecs": {"tasks": -1}}]}`, "ecs.tasks must be in 0..1000, got -1"},
		"bad team":          {`{"lambdas": [{"name": "a", "team": "Mail"}]}`, `lambdas[0] "a": team "Mail": use 1 to 32 of a-z, 0-9 and -, starting with a letter`},
		"team from a digit": {`{"lambdas": [{"name": "a", "team": "1mail"}]}`, `team "1mail": use 1 to 32`},
		"empty team":        {`{"lambdas": [{"name": "a", "team": ""}]}`, `team "": use 1 to 32`},
		"long team":         {`{"lambdas": [{"name": "a", "team": "` + strings.Repeat("a", 33) + `"}]}`, `use 1 to 32`},
		"team with _":       {`{"lambdas": [{"name": "a", "team": "mail_ops"}]}`, `team "mail_ops": use 1 to 32`},
		"bad stack":         {`{"lambdas": [{"name": "a", "team": "mail", "stack": "-x"}]}`, `lambdas[0] "a": stack "-x": use 1 to 32`},
		"stack of two teams": {`{"lambdas": [{"name": "a", "team": "mail"}, {"name": "b", "team": "search", "stack": "mail"}]}`,
			`lambdas[1] "b": stack "mail" of team "search" is also a stack of team "mail" (lambdas[0]): a stack belongs to one team`},
		"program on function": {`{"lambdas": [{"name": "a", "program": "p/a.sh"}]}`, `lambdas[0] "a": program: only for kind "ecs"`},
		"program and handler": {`{"lambdas": [{"name": "a", "kind": "ecs", "handler": "b", "program": "p/a.sh"}]}`, "handler and program: give one"},
		"program outside":     {`{"lambdas": [{"name": "a", "kind": "ecs", "program": "../a.sh"}]}`, `program "../a.sh": want a clean slash-separated path inside`},
		"program absolute":    {`{"lambdas": [{"name": "a", "kind": "ecs", "program": "/bin/a.sh"}]}`, `program "/bin/a.sh": want`},
		"program unclean":     {`{"lambdas": [{"name": "a", "kind": "ecs", "program": "p//a.sh"}]}`, `program "p//a.sh": want`},
		"second entry":        {`{"lambdas": [{"name": "a"}, {"name": "b", "timeout": "x"}]}`, `lambdas[1] "b": timeout "x"`},
		"backoff base":        {`{"lambdas": [{"name": "a", "backoff": {"base": "soon"}}]}`, `lambdas[0] "a": backoff base "soon": want a Go duration`},
		"backoff max":         {`{"lambdas": [{"name": "a", "backoff": {"base": "1m", "max": "30s"}}]}`, `lambdas[0] "a": backoff max must be within base (1m0s) and 8784h0m0s, got 30s`},
		"backoff factor":      {`{"lambdas": [{"name": "a", "backoff": {"factor": 0}}]}`, `lambdas[0] "a": backoff factor must be in 1..10, got 0`},
		"backoff jitter":      {`{"lambdas": [{"name": "a", "backoff": {"jitter": 2}}]}`, `lambdas[0] "a": backoff jitter must be in 0..1`},
		"backoff field":       {`{"lambdas": [{"name": "a", "backoff": {"bse": "1s"}}]}`, `unknown field "bse"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := registry.Parse([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%s):\n got error %v\nwant one containing %q", tc.json, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "registry: ") {
				t.Errorf("error %q does not start with registry:", err)
			}
		})
	}
}

// TestStacks: a lambda's stack is its team's name unless it names one; a team may split its
// lambdas over several stacks; Stacks and Stack list them.
func TestStacks(t *testing.T) {
	t.Parallel()
	r, err := registry.Parse([]byte(`{"lambdas": [
		{"name": "a"},
		{"name": "b", "team": "mail"},
		{"name": "c", "team": "mail", "stack": "mail-bulk"},
		{"name": "d", "team": "mail"},
		{"name": "e", "team": "` + strings.Repeat("z", 32) + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Stacks(), []string{"default", "mail", "mail-bulk", strings.Repeat("z", 32)}; !reflect.DeepEqual(got, want) {
		t.Errorf("Stacks() = %v, want %v", got, want)
	}
	team, entries := r.Stack("mail")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	if team != "mail" || !reflect.DeepEqual(names, []string{"b", "d"}) {
		t.Errorf("Stack(mail) = %s %v, want mail [b d]", team, names)
	}
	if team, _ := r.Stack("mail-bulk"); team != "mail" {
		t.Errorf("Stack(mail-bulk) is team %q's, want mail", team)
	}
	if a, _ := r.Lambda("a"); a.Team != registry.DefaultTeam || a.Stack != registry.DefaultTeam {
		t.Errorf("an entry without team is in team %q, stack %q; want %q for both", a.Team, a.Stack, registry.DefaultTeam)
	}
}

// TestGoodEdges: the largest and smallest values AWS accepts pass.
func TestGoodEdges(t *testing.T) {
	t.Parallel()
	for name, js := range map[string]string{
		"longest function": `{"lambdas": [{"name": "a", "timeout": "885s"}]}`,
		"long ecs":         `{"lambdas": [{"name": "a", "kind": "ecs", "timeout": "24h"}]}`,
		"fargate 512/4096": `{"lambdas": [{"name": "a", "kind": "ecs", "ecs": {"cpu": 512, "memory_mb": 4096}}]}`,
		"fargate 8192":     `{"lambdas": [{"name": "a", "kind": "ecs", "ecs": {"cpu": 8192, "memory_mb": 20480}}]}`,
		"no executors":     `{"lambdas": [{"name": "a", "kind": "ecs", "ecs": {"tasks": 0}}]}`,
		"batch of 10":      `{"lambdas": [{"name": "a", "concurrency": 10, "function": {"batch_size": 10, "max_concurrency": {"high": 1000}}}]}`,
		"one priority":     `{"lambdas": [{"name": "a_b-1", "priorities": ["only"]}]}`,
	} {
		if _, err := registry.Parse([]byte(js)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func limits(prefix string) registry.Limits {
	return registry.Limits{
		WorkerMargin: sqsworker.DefaultMargin,
		QueueName:    func(l, p string) (string, error) { return sqsqueue.QueueName(prefix, l, p) },
		DLQSuffix:    sqsqueue.DLQSuffix,
	}
}

// TestCheck: the rules of a deployment, with the real margin and queue names.
func TestCheck(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 60)
	for name, tc := range map[string]struct{ json, prefix, want string }{
		"margin": {`{"lambdas": [{"name": "a"}, {"name": "b", "timeout": "890s"}]}`, "atf-dev",
			`registry: lambdas[1] "b": timeout 14m50s plus the worker function's margin 15s is over AWS Lambda's 15m0s: use at most 14m45s, or kind "ecs"`},
		"queue name too long": {`{"lambdas": [{"name": "` + long + `"}]}`, "atf-staging",
			`registry: lambdas[0] "` + long + `": priority "high": queue name atf-staging-` + long + `-high is 77 characters`},
		"queue names collide": {`{"lambdas": [{"name": "a-b", "priorities": ["c"]}, {"name": "a", "priorities": ["b-c"]}]}`, "atf-dev",
			`registry: lambdas[1] "a": priority "b-c": queue name atf-dev-a-b-c is also a queue of a-b/c`},
		"queue named like a DLQ": {`{"lambdas": [{"name": "a", "priorities": ["b"]}, {"name": "a-b", "priorities": ["dlq"]}]}`, "atf-dev",
			`queue name atf-dev-a-b-dlq is also a queue of a/b`},
	} {
		r, err := registry.Parse([]byte(tc.json))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = r.Check(limits(tc.prefix))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got error %v\nwant one containing %q", name, err, tc.want)
		}
	}
	// The ECS kind has no function timeout to fit, and names that fit pass.
	r, err := registry.Parse([]byte(`{"lambdas": [{"name": "a", "kind": "ecs", "timeout": "3h"}, {"name": "b", "timeout": "885s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(limits("atf-prod")); err != nil {
		t.Error(err)
	}
}

// TestLambdasJSON: what the stack writes into ATF_LAMBDAS is what the functions read back.
func TestLambdasJSON(t *testing.T) {
	t.Parallel()
	r, err := registry.Parse([]byte(`{"lambdas": [
		{"name": "a"},
		{"name": "b", "priorities": ["x", "y"], "timeout": "90s", "concurrency": 7, "max_attempts": 3, "max_enqueued": 50, "function": {"batch_size": 7},
		 "backoff": {"base": "2s", "factor": 3}},
		{"name": "c", "kind": "ecs", "timeout": "2h"},
		{"name": "d", "max_running": 20, "key_concurrency": 2, "rate": "100/s", "key_rate": "5/m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	js, err := r.LambdasJSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"name":"a"},{"name":"b","priorities":["x","y"],"concurrency":7,"timeout":"1m30s","max_attempts":3,"max_enqueued":50,"backoff":{"base":"2s","factor":3,"max":"10m0s","jitter":0.5}},{"name":"c","timeout":"2h0m0s"},{"name":"d","max_running":20,"key_concurrency":2,"rate":"100/s","key_rate":"5/m"}]`; js != want {
		t.Errorf("LambdasJSON() = %s\nwant %s", js, want)
	}
	env := map[string]string{awsfn.EnvTable: "t", awsfn.EnvQueuePrefix: "atf-dev", awsfn.EnvLambdas: js}
	e, err := awsfn.ParseEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.Lambdas, r.TaskLambdas()) {
		t.Errorf("awsfn reads %+v\nthe registry has %+v", e.Lambdas, r.TaskLambdas())
	}
	if b, _ := r.Lambda("b"); b.Backoff == nil || *b.Backoff != (task.BackoffPolicy{Base: 2 * time.Second, Factor: 3, Max: task.DefaultBackoffMax, Jitter: task.DefaultBackoffJitter}) {
		t.Errorf("b's backoff: %+v; want base 2s, factor 3, and the defaults", b.Backoff)
	}

	if d, _ := r.Lambda("d"); d.Limits != (task.Limits{MaxRunning: 20, KeyConcurrency: 2, Rate: task.StartRate{Count: 100, Per: time.Second}, KeyRate: task.StartRate{Count: 5, Per: time.Minute}}) {
		t.Errorf("d's limits: %+v", d.Limits)
	}
	for _, bad := range []string{`"rate": "fast"`, `"key_concurrency": -1`, `"max_running": 101`, `"key_rate": "0/s"`} {
		if _, err := registry.Parse([]byte(`{"lambdas": [{"name": "e", ` + bad + `}]}`)); err == nil || !strings.Contains(err.Error(), `"e"`) {
			t.Errorf("%s: %v, want an error naming the entry", bad, err)
		}
	}

	one, err := r.LambdasJSON("c")
	if err != nil || one != `[{"name":"c","timeout":"2h0m0s"}]` {
		t.Errorf(`LambdasJSON("c") = %s, %v`, one, err)
	}
	if _, err := r.LambdasJSON("nope"); err == nil {
		t.Error(`LambdasJSON("nope") did not fail`)
	}
}

// TestRepositoryRegistry: the registry at the top of the repository is valid for every
// environment, and each entry's handler is a folder of functions/workers (make build makes
// bin/lambda/workers-<handler>.zip of it).
func TestRepositoryRegistry(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", registry.File)
	r, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"atf-dev", "atf-staging", "atf-prod"} {
		if err := r.Check(limits(env)); err != nil {
			t.Errorf("%s: %v", env, err)
		}
	}
	kinds := map[registry.Kind]bool{}
	for _, e := range r.Lambdas {
		kinds[e.Kind] = true
		if p := r.ProgramPath(e); p != "" {
			if info, err := os.Stat(p); err != nil || info.Mode()&0o111 == 0 {
				t.Errorf("lambda %s: program %s: %v, want an executable file", e.Name, p, err)
			}
			continue
		}
		if _, err := os.Stat(filepath.Join("..", "..", "functions", "workers", e.Handler, "main.go")); err != nil {
			t.Errorf("lambda %s: handler %s: %v", e.Name, e.Handler, err)
		}
	}
	if !kinds[registry.KindFunction] || !kinds[registry.KindECS] {
		t.Errorf("the example registry should hold both kinds, has %v", kinds)
	}
	if _, err := registry.Load(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestProgram: a program lambda is of kind ecs, its executor's base image holds an interpreter
// unless the entry names another, and its file is relative to the folder of the registry Load
// read.
func TestProgram(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lambdas.json")
	js := `{"lambdas": [{"name": "count", "kind": "ecs", "program": "programs/count.py"},
		{"name": "own", "kind": "ecs", "program": "own.sh", "ecs": {"image": "debian:12-slim"}}, {"name": "go"}]}`
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	count, _ := r.Lambda("count")
	if count.Program != "programs/count.py" || count.ECS.Image != registry.DefaultProgramImage || r.ProgramPath(count) != filepath.Join(dir, "programs", "count.py") {
		t.Errorf("count: program %q at %q, image %q", count.Program, r.ProgramPath(count), count.ECS.Image)
	}
	if own, _ := r.Lambda("own"); own.ECS.Image != "debian:12-slim" {
		t.Errorf("own: image %q, want the entry's", own.ECS.Image)
	}
	if g, _ := r.Lambda("go"); g.Program != "" || r.ProgramPath(g) != "" {
		t.Errorf("go: program %q at %q, want none", g.Program, r.ProgramPath(g))
	}
}

// TestLambda: an entry converts to the task.Lambda the services use, a copy.
func TestLambda(t *testing.T) {
	t.Parallel()
	r, err := registry.Parse([]byte(`{"lambdas": [{"name": "a", "priorities": ["p", "q"], "timeout": "2s", "concurrency": 3, "max_attempts": 9}]}`))
	if err != nil {
		t.Fatal(err)
	}
	e, ok := r.Lambda("a")
	if !ok {
		t.Fatal("no lambda a")
	}
	l := e.Lambda()
	want := task.Lambda{Name: "a", Priorities: []string{"p", "q"}, Timeout: 2 * time.Second, Concurrency: 3, MaxAttempts: 9}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("Lambda() = %+v, want %+v", l, want)
	}
	l.Priorities[0] = "changed"
	if e.Priorities[0] != "p" {
		t.Error("Lambda() shares its priorities with the entry")
	}
	if _, ok := r.Lambda("b"); ok {
		t.Error(`Lambda("b") found a lambda`)
	}
}
