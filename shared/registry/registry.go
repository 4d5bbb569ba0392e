// Package registry reads the lambda registry: the one file, lambdas.json at the top of the
// repository, that declares every lambda of a deployment. The CDK app in infra/ builds each
// lambda's queues, worker function or ECS service, permissions and alarms from it, and the
// functions receive its lambdas as ATF_LAMBDAS. A lambda owner adds a lambda by adding an entry.
//
// Lambdas are grouped into stacks: each lambda belongs to a team, and to one stack of that team
// (by default the stack named like the team). The CDK app deploys each stack as its own
// CloudFormation stack, atf-<env>-<stack>, so that a team deploys its lambdas alone; a team that
// outgrows one stack (CloudFormation's 500 resources, the 4 KB parameter of its lambdas) splits
// its lambdas over several with "stack". A stack belongs to one team: two teams cannot share a
// stack name, since the name is the CloudFormation stack's.
//
// An entry (only name is required; every other field has the default shown):
//
//	{
//	  "name":         "send-email",               // the lambda: 1 to 64 of a-z 0-9 - _
//	  "team":         "default",                  // its owners: 1 to 32 of a-z 0-9 -, from a letter
//	  "stack":        the team,                   // its stack, atf-<env>-<stack>: same syntax
//	  "kind":         "function",                 // "function" (a worker function fed by SQS) or "ecs"
//	  "handler":      "send-email",               // the Go handler in functions/workers/<handler>
//	  "program":      "",                         // kind ecs only, instead of handler: an executable
//	                                              //   (a shell or Python script...), by its path
//	                                              //   relative to the registry's folder
//	  "priorities":   ["high", "normal", "low"],  // highest first
//	  "timeout":      "5m",                       // one run of the handler, a Go duration
//	  "concurrency":  4,                          // tasks at once in one function instance or executor
//	  "max_attempts": 0,                          // 0: the framework's default (task.Config)
//	  "max_enqueued": 0,                          // tasks in its queues at once; 0: the default,
//	                                              //   2 × (enqueue quota + concurrency)
//	  "max_running":     0,                       // its tasks running at once, across every worker;
//	                                              //   0: no cap (see task.Limits)
//	  "key_concurrency": 0,                       // tasks of one key running at once; 0: no cap
//	  "rate":            "",                      // starts of its tasks, such as "100/s", "5/m";
//	  "key_rate":        "",                      //   and of one key's; "": no cap
//	  "backoff": {                                // its retries' delays; left out: the framework's
//	    "base": "1s", "factor": 2, "max": "10m",  //   (task.Config). The first retry waits base,
//	    "jitter": 0.5                             //   each next factor (1..10) times more, at most
//	  },                                          //   max; jitter (0..1) is the random share
//	  "function": {                               // kind function only
//	    "memory_mb":       256,
//	    "batch_size":      the concurrency, at most 10,
//	    "max_concurrency": {"high": 2, ...}       // per priority: the event source mapping's
//	  },                                          //   MaximumConcurrency, 2..1000
//	  "ecs": {                                    // kind ecs only
//	    "cpu": 256, "memory_mb": 512,             // a Fargate size
//	    "tasks": 1,                               // executors (ECS tasks) at most: they scale
//	                                              //   from 0 on the queues' depth
//	    "image": DefaultECSImage                  // the executor image's base; DefaultProgramImage
//	                                              //   for a program: it must hold its interpreter
//	  }
//	}
//
// Parse checks what holds everywhere (names, ranges, a function lambda's timeout within what
// AWS Lambda allows once the worker's margin is added); Check adds the rules of one deployment,
// such as its queue names. Errors name the entry and the field.
package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/openatf/atf/shared/task"
)

// File is the registry's name at the top of the repository.
const File = "lambdas.json"

// Kind is how a lambda's tasks run on AWS.
type Kind string

// Kinds.
const (
	// KindFunction runs tasks in a worker function (AWS Lambda) fed by one SQS event source per
	// priority. A run must fit the function's 15 minutes.
	KindFunction Kind = "function"
	// KindECS runs tasks in ECS Fargate executors that long-poll the lambda's queues in strict
	// priority order. For long runs, big handlers, or any executable.
	KindECS Kind = "ecs"
)

// Defaults of an entry.
const (
	DefaultKind              = KindFunction
	DefaultFunctionMemoryMB  = 256
	DefaultMaxConcurrency    = 2 // the least an event source mapping accepts
	DefaultECSCPU            = 256
	DefaultECSMemoryMB       = 512
	DefaultECSTasks          = 1
	DefaultFunctionBatchSize = MaxBatchSize // or the concurrency, if lower
	DefaultTeam              = "default"    // the team of an entry without one
	// DefaultECSImage is the executors' base image for a Go handler, a static binary: CA
	// certificates and a non-root user, no shell.
	DefaultECSImage = "gcr.io/distroless/static-debian12:nonroot"
	// DefaultProgramImage is their base for a program: a slim Debian with a shell and Python 3.
	DefaultProgramImage = "public.ecr.aws/docker/library/python:3.13-slim-bookworm"
)

// MaxGroupName is the longest team or stack name: with the environment's (16), the stack's
// CloudFormation name atf-<env>-<stack> and its SSM parameter stay short.
const MaxGroupName = 32

// groupNamePattern is the syntax of a team or stack name.
var groupNamePattern = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// validGroupName names what is wrong with a team or stack name, for the field called field.
func validGroupName(field, name string) error {
	if len(name) > MaxGroupName || !groupNamePattern.MatchString(name) {
		return fmt.Errorf("%s %q: use 1 to %d of a-z, 0-9 and -, starting with a letter", field, name, MaxGroupName)
	}
	return nil
}

// AWS limits that the entries must respect.
const (
	// MaxFunctionTimeout is the longest timeout AWS Lambda allows.
	MaxFunctionTimeout = 900 * time.Second
	// MinFunctionMemoryMB and MaxFunctionMemoryMB bound a function's memory.
	MinFunctionMemoryMB, MaxFunctionMemoryMB = 128, 10240
	// MinMaxConcurrency and MaxMaxConcurrency bound an SQS event source mapping's
	// MaximumConcurrency.
	MinMaxConcurrency, MaxMaxConcurrency = 2, 1000
	// MaxBatchSize is the largest batch an SQS event source mapping sends without a batching
	// window.
	MaxBatchSize = 10
	// MaxConcurrency bounds a lambda's concurrency: the tasks one instance or executor runs.
	MaxConcurrency = 1000
	// MaxECSTasks bounds the executors of one lambda.
	MaxECSTasks = 1000
)

// Registry is the parsed registry: its lambdas in file order, with every default set.
type Registry struct {
	Lambdas []Entry
	// Dir is the folder of the file Load read, which programs are relative to; empty after
	// Parse (the working directory).
	Dir string
}

// ProgramPath is the file of e's program, or "" if e runs a Go handler.
func (r *Registry) ProgramPath(e Entry) string {
	if e.Program == "" {
		return ""
	}
	return filepath.Join(r.Dir, filepath.FromSlash(e.Program))
}

// Entry is one lambda.
type Entry struct {
	Name string
	// Team owns the lambda; Stack is the group it deploys with (see the package doc).
	Team    string
	Stack   string
	Kind    Kind
	Handler string // the folder of functions/workers holding its Go handler
	// Program, if set (kind ecs only), is the lambda's handler instead: an executable file, by
	// its slash-separated path relative to the registry's folder (see ProgramPath).
	Program string
	// Priorities are the levels, highest first.
	Priorities  []string
	Timeout     time.Duration
	Concurrency int
	MaxAttempts int // zero: task.Config's MaxAttempts
	MaxEnqueued int // zero: task.Lambda's DefaultMaxEnqueued
	// Backoff is its retries' backoff; nil: task.Config's.
	Backoff *task.BackoffPolicy
	// Limits bound when its tasks start, across every worker (task.Limits).
	Limits task.Limits
	// Function is set for KindFunction, ECS for KindECS.
	Function *Function
	ECS      *ECS
}

// Function is how a KindFunction lambda's worker function runs.
type Function struct {
	MemoryMB int
	// BatchSize is the most records one invocation gets; at most Concurrency, so that no record
	// waits for a slot (see package sqsworker).
	BatchSize int
	// MaxConcurrency is, per priority, the MaximumConcurrency of that queue's event source
	// mapping: how many instances that priority may keep busy. Giving higher priorities more is
	// how worker functions favour them (ECS executors take priorities strictly).
	MaxConcurrency map[string]int
}

// ECS is how a KindECS lambda's executors run.
type ECS struct {
	CPU      int // Fargate CPU units
	MemoryMB int
	Tasks    int // executors at most; the stack scales them from 0 on the queues' depth
	// Image is the base of the executor's image, which adds the executor and the handler.
	Image string
}

// Lambda returns the entry as the framework's task.Lambda.
func (e Entry) Lambda() task.Lambda {
	return task.Lambda{
		Name: e.Name, Priorities: slices.Clone(e.Priorities), Concurrency: e.Concurrency,
		Timeout: e.Timeout, MaxAttempts: e.MaxAttempts, MaxEnqueued: e.MaxEnqueued, Backoff: e.Backoff,
		Limits: e.Limits,
	}
}

// Lambda returns the entry called name.
func (r *Registry) Lambda(name string) (Entry, bool) {
	for _, e := range r.Lambdas {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// Stacks returns the registry's stacks, sorted by name.
func (r *Registry) Stacks() []string {
	var out []string
	for _, e := range r.Lambdas {
		out = append(out, e.Stack)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Stack returns the entries of stack, in file order, and the team that owns it.
func (r *Registry) Stack(stack string) (team string, entries []Entry) {
	for _, e := range r.Lambdas {
		if e.Stack == stack {
			team, entries = e.Team, append(entries, e)
		}
	}
	return team, entries
}

// TaskLambdas returns every lambda as a task.Lambda, in file order.
func (r *Registry) TaskLambdas() []task.Lambda {
	out := make([]task.Lambda, len(r.Lambdas))
	for i, e := range r.Lambdas {
		out[i] = e.Lambda()
	}
	return out
}

// spec is a lambda as the functions read it from ATF_LAMBDAS (awsfn.LambdaSpec). Fields at the
// framework's defaults are left out, to keep the variable small: AWS Lambda allows 4 KB for all
// of a function's environment.
type spec struct {
	Name        string            `json:"name"`
	Priorities  []string          `json:"priorities,omitempty"`
	Concurrency int               `json:"concurrency,omitempty"`
	Timeout     string            `json:"timeout,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	MaxEnqueued int               `json:"max_enqueued,omitempty"`
	Backoff     *task.BackoffSpec `json:"backoff,omitempty"`
	task.LimitsSpec
}

// LambdasJSON returns the ATF_LAMBDAS value of the entries named (every entry if none is): a
// JSON array that awsfn.ParseEnv turns back into the same task.Lambda values.
func (r *Registry) LambdasJSON(names ...string) (string, error) {
	specs := []spec{}
	for _, e := range r.Lambdas {
		if len(names) > 0 && !slices.Contains(names, e.Name) {
			continue
		}
		s := spec{Name: e.Name, MaxAttempts: e.MaxAttempts, MaxEnqueued: e.MaxEnqueued, LimitsSpec: e.Limits.Spec()}
		if !slices.Equal(e.Priorities, task.DefaultPriorities) {
			s.Priorities = e.Priorities
		}
		if e.Concurrency != task.DefaultConcurrency {
			s.Concurrency = e.Concurrency
		}
		if e.Timeout != task.DefaultHandlerTimeout {
			s.Timeout = e.Timeout.String()
		}
		if e.Backoff != nil {
			b := e.Backoff.Spec()
			s.Backoff = &b
		}
		specs = append(specs, s)
	}
	for _, n := range names {
		if _, ok := r.Lambda(n); !ok {
			return "", fmt.Errorf("registry: no lambda %q", n)
		}
	}
	b, err := json.Marshal(specs)
	return string(b), err
}

// Load reads and parses the registry file at path.
func Load(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Dir, err = filepath.Abs(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return r, nil
}

// The file's shape. Pointers tell a field left out from a zero.
type (
	fileJSON struct {
		Lambdas []entryJSON `json:"lambdas"`
	}
	entryJSON struct {
		Name        string            `json:"name"`
		Team        *string           `json:"team"`
		Stack       *string           `json:"stack"`
		Kind        Kind              `json:"kind"`
		Handler     string            `json:"handler"`
		Program     string            `json:"program"`
		Priorities  []string          `json:"priorities"`
		Timeout     string            `json:"timeout"`
		Concurrency *int              `json:"concurrency"`
		MaxAttempts int               `json:"max_attempts"`
		MaxEnqueued int               `json:"max_enqueued"`
		Backoff     *task.BackoffSpec `json:"backoff"`
		task.LimitsSpec
		Function *functionJSON `json:"function"`
		ECS      *ecsJSON      `json:"ecs"`
	}
	functionJSON struct {
		MemoryMB       int            `json:"memory_mb"`
		BatchSize      int            `json:"batch_size"`
		MaxConcurrency map[string]int `json:"max_concurrency"`
	}
	ecsJSON struct {
		CPU      int    `json:"cpu"`
		MemoryMB int    `json:"memory_mb"`
		Tasks    *int   `json:"tasks"`
		Image    string `json:"image"`
	}
)

// Parse decodes a registry, sets the defaults and checks every entry. Unknown fields are errors:
// a misspelt field would otherwise be silently ignored.
func Parse(data []byte) (*Registry, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileJSON
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if dec.More() {
		return nil, errors.New("registry: more than one JSON value")
	}
	if len(f.Lambdas) == 0 {
		return nil, errors.New(`registry: "lambdas" lists no lambda`)
	}
	r := &Registry{}
	seen := map[string]int{}
	stackTeams := map[string]int{} // stack -> the first entry in it
	for i, ej := range f.Lambdas {
		e, err := ej.entry()
		if err != nil {
			return nil, fmt.Errorf("registry: lambdas[%d]%s: %w", i, quoted(ej.Name), err)
		}
		if j, ok := seen[e.Name]; ok {
			return nil, fmt.Errorf("registry: lambdas[%d] %q: name is also the name of lambdas[%d]", i, e.Name, j)
		}
		seen[e.Name] = i
		if j, ok := stackTeams[e.Stack]; ok && r.Lambdas[j].Team != e.Team {
			return nil, fmt.Errorf("registry: lambdas[%d] %q: stack %q of team %q is also a stack of team %q (lambdas[%d]): a stack belongs to one team; name it differently",
				i, e.Name, e.Stack, e.Team, r.Lambdas[j].Team, j)
		} else if !ok {
			stackTeams[e.Stack] = i
		}
		r.Lambdas = append(r.Lambdas, e)
	}
	return r, nil
}

func quoted(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" %q", name)
}

// entry sets the defaults of ej and checks it; errors name the field.
func (ej entryJSON) entry() (Entry, error) {
	if ej.Name == "" {
		return Entry{}, errors.New("name is required")
	}
	e := Entry{Name: ej.Name, Kind: ej.Kind, Handler: ej.Handler, Priorities: ej.Priorities, MaxAttempts: ej.MaxAttempts, MaxEnqueued: ej.MaxEnqueued}
	if err := task.ValidateName("name", e.Name); err != nil {
		return Entry{}, err
	}
	e.Team = DefaultTeam
	if ej.Team != nil {
		if err := validGroupName("team", *ej.Team); err != nil {
			return Entry{}, err
		}
		e.Team = *ej.Team
	}
	e.Stack = e.Team
	if ej.Stack != nil {
		if err := validGroupName("stack", *ej.Stack); err != nil {
			return Entry{}, err
		}
		e.Stack = *ej.Stack
	}
	if e.Kind == "" {
		e.Kind = DefaultKind
	}
	if e.Handler == "" {
		e.Handler = e.Name
	}
	if err := task.ValidateName("handler", e.Handler); err != nil {
		return Entry{}, err
	}
	if ej.Program != "" {
		if ej.Handler != "" {
			return Entry{}, errors.New("handler and program: give one, a Go handler of functions/workers or a program")
		}
		if p := filepath.FromSlash(ej.Program); !filepath.IsLocal(p) || filepath.ToSlash(filepath.Clean(p)) != ej.Program {
			return Entry{}, fmt.Errorf("program %q: want a clean slash-separated path inside the registry's folder, such as \"functions/programs/wordcount.py\"", ej.Program)
		}
		e.Program = ej.Program
	}
	if ej.Priorities != nil && len(ej.Priorities) == 0 {
		return Entry{}, errors.New("priorities: list at least one, or leave the field out for the default")
	}
	if ej.Timeout != "" {
		d, err := time.ParseDuration(ej.Timeout)
		if err != nil {
			return Entry{}, fmt.Errorf("timeout %q: want a Go duration such as \"90s\" or \"5m\"", ej.Timeout)
		}
		if d <= 0 {
			return Entry{}, fmt.Errorf("timeout must be positive, got %s", ej.Timeout)
		}
		e.Timeout = d
	}
	if ej.Concurrency != nil {
		if *ej.Concurrency < 1 || *ej.Concurrency > MaxConcurrency {
			return Entry{}, fmt.Errorf("concurrency must be in 1..%d, got %d", MaxConcurrency, *ej.Concurrency)
		}
		e.Concurrency = *ej.Concurrency
	}
	if ej.Backoff != nil {
		b, err := ej.Backoff.Policy()
		if err != nil {
			return Entry{}, err
		}
		e.Backoff = &b
	}
	limits, err := ej.Limits()
	if err != nil {
		return Entry{}, err
	}
	e.Limits = limits
	// The framework's defaults and rules for the rest.
	l := e.Lambda().WithDefaults()
	if err := l.Validate(); err != nil {
		return Entry{}, fieldError(err)
	}
	e.Priorities, e.Concurrency, e.Timeout = l.Priorities, l.Concurrency, l.Timeout

	switch e.Kind {
	case KindFunction:
		if ej.ECS != nil {
			return Entry{}, errors.New(`ecs: only for kind "ecs"; this lambda is kind "function"`)
		}
		if e.Program != "" {
			return Entry{}, errors.New(`program: only for kind "ecs", whose executor image carries it; a worker function runs a Go handler`)
		}
		fn, err := ej.Function.function(e)
		if err != nil {
			return Entry{}, err
		}
		e.Function = fn
	case KindECS:
		if ej.Function != nil {
			return Entry{}, errors.New(`function: only for kind "function"; this lambda is kind "ecs"`)
		}
		ecs, err := ej.ECS.ecs(e.Program != "")
		if err != nil {
			return Entry{}, err
		}
		e.ECS = ecs
	default:
		return Entry{}, fmt.Errorf("kind %q: want %q or %q", e.Kind, KindFunction, KindECS)
	}
	return e, nil
}

// fieldError rewords an error of task.Lambda.Validate, which starts with "lambda <name>: ".
func fieldError(err error) error {
	msg := err.Error()
	if strings.HasPrefix(msg, "lambda ") {
		if _, rest, ok := strings.Cut(msg, ": "); ok {
			return errors.New(rest)
		}
	}
	return err
}

func (fj *functionJSON) function(e Entry) (*Function, error) {
	if fj == nil {
		fj = &functionJSON{}
	}
	fn := &Function{MemoryMB: fj.MemoryMB, BatchSize: fj.BatchSize, MaxConcurrency: map[string]int{}}
	// The worker function's timeout is the lambda's plus sqsworker's margin, which Check adds;
	// the timeout alone must already fit.
	if e.Timeout >= MaxFunctionTimeout {
		return nil, fmt.Errorf("timeout %s: a worker function runs at most %s, with a margin: use kind \"ecs\" for longer runs", e.Timeout, MaxFunctionTimeout)
	}
	if fn.MemoryMB == 0 {
		fn.MemoryMB = DefaultFunctionMemoryMB
	}
	if fn.MemoryMB < MinFunctionMemoryMB || fn.MemoryMB > MaxFunctionMemoryMB {
		return nil, fmt.Errorf("function.memory_mb must be in %d..%d, got %d", MinFunctionMemoryMB, MaxFunctionMemoryMB, fn.MemoryMB)
	}
	if fn.BatchSize == 0 {
		fn.BatchSize = min(e.Concurrency, DefaultFunctionBatchSize)
	}
	if fn.BatchSize < 1 || fn.BatchSize > MaxBatchSize {
		return nil, fmt.Errorf("function.batch_size must be in 1..%d, got %d", MaxBatchSize, fn.BatchSize)
	}
	if fn.BatchSize > e.Concurrency {
		return nil, fmt.Errorf("function.batch_size %d is over concurrency %d: records would wait in the function for a slot", fn.BatchSize, e.Concurrency)
	}
	for _, p := range slices.Sorted(maps.Keys(fj.MaxConcurrency)) {
		if !slices.Contains(e.Priorities, p) {
			return nil, fmt.Errorf("function.max_concurrency: %q is not one of the priorities %v", p, e.Priorities)
		}
	}
	for _, p := range e.Priorities {
		n, ok := fj.MaxConcurrency[p]
		if !ok {
			n = DefaultMaxConcurrency
		}
		if n < MinMaxConcurrency || n > MaxMaxConcurrency {
			return nil, fmt.Errorf("function.max_concurrency.%s must be in %d..%d (AWS's bounds for an event source mapping), got %d", p, MinMaxConcurrency, MaxMaxConcurrency, n)
		}
		fn.MaxConcurrency[p] = n
	}
	return fn, nil
}

// fargate lists the memory sizes (MB) Fargate accepts for each CPU size: from, to, step.
var fargate = map[int][3]int{
	256:   {512, 2048, 512}, // 512, 1024, 2048
	512:   {1024, 4096, 1024},
	1024:  {2048, 8192, 1024},
	2048:  {4096, 16384, 1024},
	4096:  {8192, 30720, 1024},
	8192:  {16384, 61440, 4096},
	16384: {32768, 122880, 8192},
}

func fargateMemoryOK(cpu, mem int) bool {
	r, ok := fargate[cpu]
	if !ok {
		return false
	}
	if cpu == 256 {
		return mem == 512 || mem == 1024 || mem == 2048
	}
	return mem >= r[0] && mem <= r[1] && (mem-r[0])%r[2] == 0
}

func (ej *ecsJSON) ecs(program bool) (*ECS, error) {
	if ej == nil {
		ej = &ecsJSON{}
	}
	c := &ECS{CPU: ej.CPU, MemoryMB: ej.MemoryMB, Tasks: DefaultECSTasks, Image: ej.Image}
	if c.Image == "" {
		c.Image = DefaultECSImage
		if program {
			c.Image = DefaultProgramImage
		}
	}
	if c.CPU == 0 {
		c.CPU = DefaultECSCPU
	}
	if _, ok := fargate[c.CPU]; !ok {
		return nil, fmt.Errorf("ecs.cpu %d: want one of %v", c.CPU, slices.Sorted(maps.Keys(fargate)))
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = max(DefaultECSMemoryMB, fargate[c.CPU][0])
	}
	if !fargateMemoryOK(c.CPU, c.MemoryMB) {
		r := fargate[c.CPU]
		return nil, fmt.Errorf("ecs.memory_mb %d does not go with ecs.cpu %d: Fargate takes %d..%d in steps of %d", c.MemoryMB, c.CPU, r[0], r[1], r[2])
	}
	if ej.Tasks != nil {
		c.Tasks = *ej.Tasks
	}
	if c.Tasks < 0 || c.Tasks > MaxECSTasks {
		return nil, fmt.Errorf("ecs.tasks must be in 0..%d, got %d", MaxECSTasks, c.Tasks)
	}
	return c, nil
}

// Limits are the rules of one deployment that Check applies.
type Limits struct {
	// WorkerMargin is what a worker function adds to its lambda's timeout to get the function's
	// timeout (sqsworker.DefaultMargin); the sum must fit MaxFunctionTimeout.
	WorkerMargin time.Duration
	// QueueName, if set, returns the name of the queue of a lambda's priority in the
	// deployment, or why there can be none (sqsqueue.QueueName with the environment's prefix).
	// Check also refuses two queues of one name, and a queue named like a dead-letter queue of
	// another (DLQSuffix).
	QueueName func(lambda, priority string) (string, error)
	// DLQSuffix ends the name of a dead-letter queue (sqsqueue.DLQSuffix).
	DLQSuffix string
}

// Check applies l to every entry and names the first entry and field that break it.
func (r *Registry) Check(l Limits) error {
	owners := map[string]string{} // queue name -> lambda/priority
	for i, e := range r.Lambdas {
		at := fmt.Sprintf("registry: lambdas[%d] %q", i, e.Name)
		if e.Kind == KindFunction && e.Timeout+l.WorkerMargin > MaxFunctionTimeout {
			return fmt.Errorf("%s: timeout %s plus the worker function's margin %s is over AWS Lambda's %s: use at most %s, or kind \"ecs\"",
				at, e.Timeout, l.WorkerMargin, MaxFunctionTimeout, MaxFunctionTimeout-l.WorkerMargin)
		}
		if l.QueueName == nil {
			continue
		}
		for _, p := range e.Priorities {
			name, err := l.QueueName(e.Name, p)
			if err != nil {
				return fmt.Errorf("%s: priority %q: %w", at, p, err)
			}
			owner := e.Name + "/" + p
			names := []string{name}
			if l.DLQSuffix != "" {
				names = append(names, name+l.DLQSuffix)
			}
			for _, n := range names {
				if other, ok := owners[n]; ok {
					return fmt.Errorf("%s: priority %q: queue name %s is also a queue of %s: rename a lambda or priority", at, p, n, other)
				}
				owners[n] = owner
			}
		}
	}
	return nil
}
