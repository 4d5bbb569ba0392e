// Command atf runs atf on one machine (atf dev) and talks to an atf API.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

const usage = `atf: an async task framework.

Usage:
  atf dev --handlers DIR [--addr 127.0.0.1:8080] [--db .atf/atf.db] [--concurrency N]
          [--timeout 5m] [--poll 100ms] [--grace 10s] [--retention 720h]
          [--backend embedded|aws] [--table atf-dev] [--queue-prefix atf-dev] [--shards 4] [--create]
          [--token TOKEN]
      run everything in one process, on the embedded store or on DynamoDB and SQS
  atf create --handlers DIR [--table atf-dev] [--queue-prefix atf-dev]
      create the DynamoDB table and the SQS queues of the lambdas in DIR (AWS_* environment)
  atf schedule LAMBDA [--payload JSON] [--delay 90s | --at RFC3339] [--priority P]
          [--collection C] [--key K] [--id ID] [--max-attempts N] [--deadline RFC3339]
          [--after REF]... [--trigger-rule all_success|all_done]
      --after (repeatable) makes the task wait for another: pending until it succeeded
      (all_success, the default) or ended (all_done)
  atf schedule [LAMBDA] --file tasks.jsonl
      one schedule body a line (as the API takes it; "lambda" for a line of another lambda, or
      of any when LAMBDA is not given; --file - reads standard input), sent in batches of up to
      100 with a progress bar; prints how many were created, replayed and failed, and the
      failed lines by number
  atf get LAMBDA ID [--wait DURATION]
      with --wait, once the task has ended, or as it stands after DURATION (such as 2m)
` + attemptsUsage + logsUsage + `  atf list LAMBDA [--status S[,S]...] [--collection C] [--created-from RFC3339]
          [--created-to RFC3339] [--limit N] [--cursor C]
  atf failed [--status dead|fatal_failure] [--limit N] [--cursor C]
      the tasks of every lambda that failed for good, the latest first: the dead letters
      that atf redrive takes
  atf redrive LAMBDA ID [--payload JSON] [--priority P] [--max-attempts N]
  atf redrive LAMBDA --all | [--status dead|fatal_failure] [--collection C]
          [--created-from RFC3339] [--created-to RFC3339] [--limit N] [--payload JSON] ...
      a dead or fatally failed task runs again with a fresh attempt budget; without ID, every
      failed task the filters match (--all: every one), a page per request, with progress
  atf cancel LAMBDA ID
      a waiting task ends cancelled; a running one is marked, and ends cancelled once its
      executor has stopped it (a Go handler's context is cancelled, a program gets SIGTERM)
  atf cancel LAMBDA [--collection C] [--status S] [--cursor C]
      cancel every task of a collection, a status, or both, a page (100 tasks) per request;
      prints the counts
  atf after LAMBDA ID REF...
      make a task that has not started wait for more tasks
  atf graph LAMBDA ID [--limit 200] [--depth N]
      the tasks a task waits for and those that wait for it, recursively, with their statuses:
      at most --limit tasks each way, --depth levels if given
  atf gate LAMBDA open|pause|drop [--collection C]
  atf lambdas
  atf version
      atf's version, and the revision it was built from
` + dashboardUsage + schedulesUsage + tailUsage + newUsage + completionUsage + `
A REF names a task: ID, of the same lambda, or LAMBDA/ID. A command's LAMBDA ID may also be
given as LAMBDA/ID. --payload takes JSON, @FILE for a file's, or @- for standard input's.

Client commands take --endpoint (default http://127.0.0.1:8080, or $ATF_ENDPOINT) and --token
(default $ATF_TOKEN). Their requests to an API Gateway endpoint, such as a deployed stack's
https://ID.execute-api.REGION.amazonaws.com, are signed with SigV4 (the IAM action is
execute-api:Invoke), with the AWS credentials of the environment, profile, SSO or instance role,
for --region (default the endpoint's region, else $AWS_REGION); ATF_SIGV4=1 signs them for any
endpoint. Every command takes --json: its output as JSON (atf dev: its log as JSON lines; atf
tail: an event a line), and an error as {"error": "..."} on stderr. --json, --endpoint, --token
and --region may also come before the command, as in atf --json lambdas.
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if jsonWanted(os.Args[1:]) {
			_ = json.NewEncoder(os.Stderr).Encode(map[string]string{"error": err.Error()})
		} else {
			fmt.Fprintln(os.Stderr, "atf:", err)
		}
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	args, err := hoistFlags(args)
	if err != nil {
		return err
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, usage)
		return nil
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "version":
		return version(args, out)
	case "dev":
		return dev(args)
	case "create":
		return create(args, out)
	case "new":
		return newCommand(args, out)
	case "completion":
		return completion(args, out)
	case "dashboard":
		return dashboardCommand(args, out)
	}
	cl := clientCommands[cmd]
	st, isStream := streamCommands[cmd]
	if isStream {
		cl = st.clientCommand
	}
	if cl.run == nil && !isStream {
		return fmt.Errorf("unknown command %q; run atf help", cmd)
	}
	fs := flag.NewFlagSet("atf "+cmd, flag.ContinueOnError)
	endpoint := fs.String("endpoint", envOr("ATF_ENDPOINT", "http://127.0.0.1:8080"), "atf API endpoint")
	asJSON := fs.Bool("json", false, "print JSON")
	token := fs.String("token", "", "the API's bearer token, if atf dev has one (default $ATF_TOKEN)")
	region := fs.String("region", "", "the AWS region to sign requests for (default an API Gateway endpoint's, else $AWS_REGION)")
	opts := flagValues{}
	for _, name := range cl.flags {
		set := fs.Func
		if boolFlags[name] {
			set = fs.BoolFunc
		}
		set(name, name, func(v string) error {
			opts[name] = append(opts[name], v)
			return nil
		})
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if taskCommands[cmd] && len(pos) > 0 {
		if pos, err = splitTaskRef(pos); err != nil {
			return err
		}
	}
	if len(pos) < cl.args || len(pos) > cl.args && !cl.more {
		more := ""
		if cl.more {
			more = " or more"
		}
		return fmt.Errorf("%s needs %d%s argument(s): %s", cmd, cl.args, more, cl.argNames)
	}
	wait, err := waitFlag(opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+wait)
	defer cancel()
	c := &client.Client{Endpoint: strings.TrimRight(*endpoint, "/"), Token: cmp.Or(*token, os.Getenv("ATF_TOKEN"))}
	if c.SigV4, err = sigV4Config(ctx, c.Endpoint, *region); err != nil {
		return err
	}
	if isStream {
		// It runs until interrupted, each request on a deadline of its own.
		sctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return explain(st.stream(sctx, c, pos, opts, out, *asJSON), c)
	}
	v, err := cl.run(ctx, c, pos, opts)
	if err != nil {
		return explain(err, c)
	}
	if *asJSON {
		err = printJSON(out, v)
	} else {
		err = printTable(out, v)
	}
	if o, ok := v.(outcome); ok && err == nil {
		return o.err() // a command that went on past errors, such as schedule --file, tells them last
	}
	return err
}

// outcome is a command's result that carries an error to exit with once it is printed.
type outcome interface{ err() error }

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonWanted tells whether the command line asks for JSON (--json), so that even its error is
// JSON: {"error": "..."} on stderr.
func jsonWanted(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--json" || a == "-json" || a == "--json=true" || a == "-json=true" {
			return true
		}
	}
	return false
}

// clientFlags are the flags every client command takes, and whether each takes a value.
var clientFlags = map[string]bool{"json": false, "endpoint": true, "token": true, "region": true}

// hoistFlags moves the client flags given before the command (atf --json lambdas) after it,
// where the command's own flags are read.
func hoistFlags(args []string) ([]string, error) {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" && args[i] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if name == "h" || name == "help" {
			return args[i:], nil
		}
		takesValue, ok := clientFlags[name]
		if !ok {
			return nil, fmt.Errorf("flag %s before the command: only --json, --endpoint, --token and --region may come first; run atf help", args[i])
		}
		i++
		if takesValue && !hasValue {
			if i == len(args) {
				return nil, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
		}
	}
	if i == 0 || i == len(args) {
		return args[i:], nil
	}
	return slices.Concat(args[i:i+1], args[:i], args[i+1:]), nil
}

// parse lets flags come before or after the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type clientCommand struct {
	args     int  // how many positional arguments it takes
	more     bool // and whether it takes more than args
	argNames string
	flags    []string // the names of its string flags
	run      func(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error)
}

// streamCommand is a client command that prints as it goes (JSON lines with --json) until ctx
// ends, rather than a result: its clientCommand has no run.
type streamCommand struct {
	clientCommand
	stream func(ctx context.Context, c *client.Client, pos []string, o flagValues, out io.Writer, asJSON bool) error
}

var streamCommands = map[string]streamCommand{}

// flagValues holds each flag's values in the order given.
type flagValues map[string][]string

// get is the flag's last value, "" if it was not given.
func (o flagValues) get(name string) string {
	if v := o[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// intFlag is the flag's last value as a number, or def if it was not given.
func (o flagValues) intFlag(name string, def int) (int, error) {
	s := o.get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("--%s %q is not a number", name, s)
	}
	return n, nil
}

// maxPayloadFile bounds what --payload @FILE reads: well over any lambda's payload limit, which
// the API holds each payload to.
const maxPayloadFile = 8 << 20

// stdin is what --payload @- reads.
var stdin io.Reader = os.Stdin

// payload returns --payload: JSON, @FILE for a file's content, or @- for standard input; nil
// if it was not given.
func (o flagValues) payload() (json.RawMessage, error) {
	p := o.get("payload")
	if p == "" {
		return nil, nil
	}
	if file, ok := strings.CutPrefix(p, "@"); ok {
		r := stdin
		if file != "-" {
			f, err := os.Open(file)
			if err != nil {
				return nil, fmt.Errorf("--payload: %w", err)
			}
			defer f.Close()
			r = f
		}
		b, err := io.ReadAll(io.LimitReader(r, maxPayloadFile+1))
		if err != nil {
			return nil, fmt.Errorf("--payload %s: %w", p, err)
		}
		if len(b) > maxPayloadFile {
			return nil, fmt.Errorf("--payload %s is over %d bytes", p, maxPayloadFile)
		}
		if !json.Valid(b) {
			return nil, fmt.Errorf("--payload %s is not valid JSON", p)
		}
		return json.RawMessage(bytes.TrimSpace(b)), nil
	}
	if !json.Valid([]byte(p)) {
		return nil, fmt.Errorf("--payload is not valid JSON: %s", p)
	}
	return json.RawMessage(p), nil
}

// parseRef reads a REF: ID, a task of the lambda at hand, or LAMBDA/ID.
func parseRef(s string) (task.Ref, error) {
	lambda, id, found := strings.Cut(s, "/")
	if !found {
		lambda, id = "", s
	}
	if id == "" || found && lambda == "" || strings.Contains(id, "/") {
		return task.Ref{}, fmt.Errorf("%q names no task: give ID or LAMBDA/ID", s)
	}
	return task.Ref{Lambda: lambda, ID: id}, nil
}

// taskCommands are the commands whose first arguments are LAMBDA ID, which may also be given as
// one LAMBDA/ID (a lambda's name has no '/').
var taskCommands = map[string]bool{"get": true, "cancel": true, "after": true, "graph": true, "redrive": true, "attempts": true, "logs": true}

// splitTaskRef reads a first argument LAMBDA/ID as LAMBDA ID.
func splitTaskRef(pos []string) ([]string, error) {
	if !strings.Contains(pos[0], "/") {
		return pos, nil
	}
	r, err := parseRef(pos[0])
	if err != nil || r.Lambda == "" {
		return nil, fmt.Errorf("%q names no task: give LAMBDA ID or LAMBDA/ID", pos[0])
	}
	return slices.Concat([]string{r.Lambda, r.ID}, pos[1:]), nil
}

func parseRefs(ss []string) ([]task.Ref, error) {
	refs := make([]task.Ref, len(ss))
	for i, s := range ss {
		var err error
		if refs[i], err = parseRef(s); err != nil {
			return nil, err
		}
	}
	return refs, nil
}

var clientCommands = map[string]clientCommand{
	"schedule": {0, true, "LAMBDA, or --file F", []string{"payload", "delay", "at", "priority", "collection", "key", "id", "max-attempts", "deadline", "after", "trigger-rule", "file"},
		func(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
			if file := o.get("file"); file != "" {
				if len(pos) > 1 {
					return nil, fmt.Errorf("schedule --file takes at most one LAMBDA, the lambda of lines that name none")
				}
				return scheduleFile(ctx, c, strings.Join(pos, ""), file)
			}
			if len(pos) != 1 {
				return nil, fmt.Errorf("schedule needs one argument, LAMBDA, or --file F")
			}
			req := client.ScheduleRequest{
				ID: o.get("id"), RunAt: o.get("at"), Delay: o.get("delay"), Priority: o.get("priority"),
				Collection: o.get("collection"), Key: o.get("key"), Deadline: o.get("deadline"), TriggerRule: o.get("trigger-rule"),
			}
			var err error
			if req.Payload, err = o.payload(); err != nil {
				return nil, err
			}
			if req.MaxAttempts, err = o.intFlag("max-attempts", 0); err != nil {
				return nil, err
			}
			if req.After, err = parseRefs(o["after"]); err != nil {
				return nil, fmt.Errorf("--after: %w", err)
			}
			t, _, err := c.Schedule(ctx, pos[0], req)
			return t, err
		}},
	"get": {2, false, "LAMBDA ID", []string{"wait"}, func(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
		wait, err := waitFlag(o)
		if err != nil || wait == 0 {
			return c.Get(ctx, pos[0], pos[1])
		}
		return getWait(ctx, c, pos[0], pos[1], wait)
	}},
	"list": {1, false, "LAMBDA", []string{"status", "collection", "limit", "cursor", "created-from", "created-to"},
		func(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
			p := task.ListParams{Lambda: pos[0], Collection: o.get("collection"), Cursor: o.get("cursor")}
			err := listFilterFlags(o, &p)
			if err != nil {
				return nil, err
			}
			if p.Limit, err = o.intFlag("limit", 0); err != nil {
				return nil, err
			}
			// A filtered page may come short, even empty, with a cursor: fill it from the
			// next ones, a bounded number of them.
			tasks, next, err := c.ListUpTo(ctx, p, listPages)
			if err != nil {
				return nil, err
			}
			return taskPage{Tasks: tasks, NextCursor: next}, nil
		}},
	"failed": {0, false, "", []string{"status", "limit", "cursor"}, func(ctx context.Context, c *client.Client, _ []string, o flagValues) (any, error) {
		var p task.FailedParams
		for _, v := range o["status"] {
			for _, st := range strings.Split(v, ",") {
				if st != "" {
					p.Statuses = append(p.Statuses, task.Status(st))
				}
			}
		}
		var err error
		if p.Limit, err = o.intFlag("limit", 0); err != nil {
			return nil, err
		}
		p.Cursor = o.get("cursor")
		tasks, next, err := c.ListFailed(ctx, p)
		if err != nil {
			return nil, err
		}
		return failedPage{Tasks: tasks, NextCursor: next}, nil
	}},
	"cancel": {1, true, "LAMBDA ID, or LAMBDA with --collection or --status", []string{"collection", "status", "cursor"}, runCancel},
	"after": {3, true, "LAMBDA ID REF...", nil, func(ctx context.Context, c *client.Client, pos []string, _ flagValues) (any, error) {
		refs, err := parseRefs(pos[2:])
		if err != nil {
			return nil, err
		}
		return c.AddUpstreams(ctx, pos[0], pos[1], refs)
	}},
	"graph": {2, false, "LAMBDA ID", []string{"limit", "depth"}, func(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
		limit, err := o.intFlag("limit", defaultGraphLimit)
		if err != nil {
			return nil, err
		}
		depth, err := o.intFlag("depth", 0)
		if err != nil {
			return nil, err
		}
		if limit < 1 || limit > maxGraphLimit || depth < 0 {
			return nil, fmt.Errorf("--limit must be in 1..%d and --depth at least 0", maxGraphLimit)
		}
		return walkGraph(ctx, c, task.Ref{Lambda: pos[0], ID: pos[1]}, limit, depth)
	}},
	"gate": {2, false, "LAMBDA MODE", []string{"collection"}, func(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
		return c.SetGate(ctx, pos[0], o.get("collection"), pos[1])
	}},
	"lambdas": {0, false, "", nil, func(ctx context.Context, c *client.Client, _ []string, _ flagValues) (any, error) {
		return c.Lambdas(ctx)
	}},
	"redrive": {1, true, "LAMBDA [ID]", redriveFlags, redrive},
}

// waitFlag returns the duration of a command's --wait, zero without one.
func waitFlag(o flagValues) (time.Duration, error) {
	w := o.get("wait")
	if w == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(w)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--wait %q is not a duration such as 30s or 5m", w)
	}
	return d, nil
}

// getWait returns the task once it has ended, or as it stands after wait. A request waits at
// most client.DefaultMaxWait, so a longer wait takes several.
func getWait(ctx context.Context, c *client.Client, lambda, id string, wait time.Duration) (task.Task, error) {
	end := time.Now().Add(wait)
	for {
		t, err := c.GetWait(ctx, lambda, id, max(0, min(time.Until(end), client.DefaultMaxWait)))
		if err != nil || t.Status.Terminal() || !time.Now().Before(end) {
			return t, err
		}
	}
}

// listPages is how many API pages one `atf list` reads at most to fill its page: with a sparse
// filter, about listPages × the read budget of a page (task.ListParams.ReadBudget) entries.
const listPages = 10

type taskPage struct {
	Tasks      []task.Task `json:"tasks"`
	NextCursor string      `json:"next_cursor"`
}

// failedPage is a page of `atf failed`: tasks of any lambda, so its table names theirs.
type failedPage taskPage

func printTable(out io.Writer, v any) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer w.Flush()
	line := func(cols ...string) { fmt.Fprintln(w, strings.Join(cols, "\t")) }
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	}
	switch v := v.(type) {
	case task.Task:
		for _, kv := range [][2]string{
			{"id", v.ID}, {"lambda", v.Lambda}, {"collection", v.Collection}, {"priority", v.Priority},
			{"status", string(v.Status)}, {"attempts", fmt.Sprintf("%d of %d", v.Attempts, v.MaxAttempts)},
			{"run_at", when(&v.RunAt)}, {"next_trigger_at", when(v.NextTriggerAt)},
			{"payload", compactJSON(v.Payload)}, {"result", compactJSON(v.Result)}, {"error", firstLine(v.Error)},
		} {
			line(kv[0]+":", kv[1])
		}
		if v.Key != "" {
			line("key:", v.Key)
		}
		if g := v.HeldBy; g != nil {
			line("held_by:", heldBy(*g))
		}
		if v.CancelRequested {
			line("cancel_requested:", "yes: it ends cancelled once its executor has stopped it")
		}
		if len(v.After) > 0 {
			line("after:", refList(v.After, 5))
			line("trigger_rule:", v.TriggerRule())
		}
	case task.History:
		printAttempts(w, v)
	case attemptLog:
		printLog(out, v) // as written: not through the table's columns
	case taskPage:
		line("ID", "STATUS", "PRIORITY", "COLLECTION", "ATTEMPTS", "RUN AT", "ERROR")
		for _, t := range v.Tasks {
			line(t.ID, string(t.Status), t.Priority, t.Collection, fmt.Sprint(t.Attempts), when(&t.RunAt), firstLine(t.Error))
		}
		if v.NextCursor != "" {
			w.Flush()
			fmt.Fprintf(out, "more: --cursor %s\n", v.NextCursor)
		}
	case failedPage:
		line("LAMBDA", "ID", "STATUS", "ATTEMPTS", "UPDATED", "ERROR")
		for _, t := range v.Tasks {
			line(t.Lambda, t.ID, string(t.Status), fmt.Sprint(t.Attempts), when(&t.UpdatedAt), firstLine(t.Error))
		}
		if v.NextCursor != "" {
			w.Flush()
			fmt.Fprintf(out, "more: atf failed --cursor %s\n", v.NextCursor)
		}
	case graphView:
		printGraph(w, v)
	case client.CancelPage:
		printCancelPage(line, v)
	case redriveView:
		printRedrive(w, v)
	case fileSummary:
		printFileSummary(w, v)
	case scheduleView, schedulePage, deleted:
		printSchedules(w, v)
	case task.Gate:
		line("lambda:", v.Lambda)
		if v.Collection != "" {
			line("collection:", v.Collection)
		}
		line("mode:", v.Mode)
	default:
		return printLambdas(w, v)
	}
	return nil
}

// heldBy says which paused gate holds a task, and how to open it.
func heldBy(g task.Gate) string {
	if g.Collection != "" {
		return fmt.Sprintf("the paused gate of collection %s (atf gate %s open --collection %s)", g.Collection, g.Lambda, g.Collection)
	}
	return fmt.Sprintf("the paused gate of lambda %s (atf gate %s open)", g.Lambda, g.Lambda)
}

// refList lists refs, the first n of them and how many in all.
func refList(refs []task.Ref, n int) string {
	var parts []string
	for _, r := range refs[:min(n, len(refs))] {
		parts = append(parts, r.String())
	}
	s := strings.Join(parts, ", ")
	if len(refs) > n {
		s += fmt.Sprintf(", ... (%d in all)", len(refs))
	}
	return s
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
