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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

const usage = `atf: an async task framework.

Usage:
  atf dev --handlers DIR [--addr 127.0.0.1:8080] [--db .atf/atf.db] [--concurrency N]
          [--timeout 5m] [--poll 100ms] [--grace 10s]
          [--backend embedded|aws] [--table atf-dev] [--queue-prefix atf-dev] [--shards 4] [--create]
          [--token TOKEN]
      run everything in one process, on the embedded store or on DynamoDB and SQS
  atf create --handlers DIR [--table atf-dev] [--queue-prefix atf-dev]
      create the DynamoDB table and the SQS queues of the lambdas in DIR (AWS_* environment)
  atf schedule LAMBDA [--payload JSON] [--delay 90s | --at RFC3339] [--priority P]
          [--collection C] [--id ID] [--max-attempts N] [--deadline RFC3339]
  atf get LAMBDA ID [--wait DURATION]
      with --wait, once the task has ended, or as it stands after DURATION (such as 2m)
  atf list LAMBDA [--status S] [--collection C] [--limit N] [--cursor C]
  atf cancel LAMBDA ID
  atf gate LAMBDA open|pause|drop [--collection C]
  atf lambdas

Client commands take --endpoint (default http://127.0.0.1:8080, or $ATF_ENDPOINT), --token
(default $ATF_TOKEN) and --json.
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "atf:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, usage)
		return nil
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "dev":
		return dev(args)
	case "create":
		return create(args, out)
	}
	cl := clientCommands[cmd]
	if cl.run == nil {
		return fmt.Errorf("unknown command %q; run atf help", cmd)
	}
	fs := flag.NewFlagSet("atf "+cmd, flag.ContinueOnError)
	endpoint := fs.String("endpoint", envOr("ATF_ENDPOINT", "http://127.0.0.1:8080"), "atf API endpoint")
	asJSON := fs.Bool("json", false, "print JSON")
	token := fs.String("token", "", "the API's bearer token, if atf dev has one (default $ATF_TOKEN)")
	opts := cl.flags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != cl.args {
		return fmt.Errorf("%s needs %d argument(s): %s", cmd, cl.args, cl.argNames)
	}
	wait, err := waitFlag(opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+wait)
	defer cancel()
	c := &client.Client{Endpoint: strings.TrimRight(*endpoint, "/"), Token: cmp.Or(*token, os.Getenv("ATF_TOKEN"))}
	v, err := cl.run(ctx, c, pos, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return printTable(out, v)
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
	args     int
	argNames string
	flags    func(fs *flag.FlagSet) map[string]*string
	run      func(ctx context.Context, c *client.Client, pos []string, o map[string]*string) (any, error)
}

func stringFlags(names ...string) func(*flag.FlagSet) map[string]*string {
	return func(fs *flag.FlagSet) map[string]*string {
		m := map[string]*string{}
		for _, n := range names {
			m[n] = fs.String(n, "", n)
		}
		return m
	}
}

var clientCommands = map[string]clientCommand{
	"schedule": {1, "LAMBDA", stringFlags("payload", "delay", "at", "priority", "collection", "id", "max-attempts", "deadline"),
		func(ctx context.Context, c *client.Client, pos []string, o map[string]*string) (any, error) {
			req := client.ScheduleRequest{
				ID: *o["id"], RunAt: *o["at"], Delay: *o["delay"], Priority: *o["priority"],
				Collection: *o["collection"], Deadline: *o["deadline"],
			}
			if p := *o["payload"]; p != "" {
				if !json.Valid([]byte(p)) {
					return nil, fmt.Errorf("--payload is not valid JSON: %s", p)
				}
				req.Payload = json.RawMessage(p)
			}
			if m := *o["max-attempts"]; m != "" {
				if _, err := fmt.Sscan(m, &req.MaxAttempts); err != nil {
					return nil, fmt.Errorf("--max-attempts %q is not a number", m)
				}
			}
			t, _, err := c.Schedule(ctx, pos[0], req)
			return t, err
		}},
	"get": {2, "LAMBDA ID", stringFlags("wait"), func(ctx context.Context, c *client.Client, pos []string, o map[string]*string) (any, error) {
		wait, err := waitFlag(o)
		if err != nil || wait == 0 {
			return c.Get(ctx, pos[0], pos[1])
		}
		return getWait(ctx, c, pos[0], pos[1], wait)
	}},
	"list": {1, "LAMBDA", stringFlags("status", "collection", "limit", "cursor"),
		func(ctx context.Context, c *client.Client, pos []string, o map[string]*string) (any, error) {
			p := task.ListParams{Lambda: pos[0], Status: task.Status(*o["status"]), Collection: *o["collection"], Cursor: *o["cursor"]}
			if l := *o["limit"]; l != "" {
				if _, err := fmt.Sscan(l, &p.Limit); err != nil {
					return nil, fmt.Errorf("--limit %q is not a number", l)
				}
			}
			// A filtered page may come short, even empty, with a cursor: fill it from the
			// next ones, a bounded number of them.
			tasks, next, err := c.ListUpTo(ctx, p, listPages)
			if err != nil {
				return nil, err
			}
			return taskPage{Tasks: tasks, NextCursor: next}, nil
		}},
	"cancel": {2, "LAMBDA ID", stringFlags(), func(ctx context.Context, c *client.Client, pos []string, _ map[string]*string) (any, error) {
		return c.Cancel(ctx, pos[0], pos[1])
	}},
	"gate": {2, "LAMBDA MODE", stringFlags("collection"), func(ctx context.Context, c *client.Client, pos []string, o map[string]*string) (any, error) {
		return c.SetGate(ctx, pos[0], *o["collection"], pos[1])
	}},
	"lambdas": {0, "", stringFlags(), func(ctx context.Context, c *client.Client, _ []string, _ map[string]*string) (any, error) {
		return c.Lambdas(ctx)
	}},
}

// waitFlag returns the duration of a command's --wait, zero without one.
func waitFlag(o map[string]*string) (time.Duration, error) {
	w, ok := o["wait"]
	if !ok || *w == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(*w)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--wait %q is not a duration such as 30s or 5m", *w)
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
	case taskPage:
		line("ID", "STATUS", "PRIORITY", "COLLECTION", "ATTEMPTS", "RUN AT", "ERROR")
		for _, t := range v.Tasks {
			line(t.ID, string(t.Status), t.Priority, t.Collection, fmt.Sprint(t.Attempts), when(&t.RunAt), firstLine(t.Error))
		}
		if v.NextCursor != "" {
			w.Flush()
			fmt.Fprintf(out, "more: --cursor %s\n", v.NextCursor)
		}
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

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
