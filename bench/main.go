// Command bench measures atf: embedded throughput next to River and asynq, delivery latency on
// the embedded backend and on the emulators, the schedule API's rate, and what a task costs on
// AWS, priced from the calls the function handlers make on the emulators. It prints a table and
// writes bench/results.json. `make bench` runs it with the emulators and the peers' servers up;
// docs/benchmarks.md explains each number and what limits it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openatf/atf/shared/registry"
)

// sizes are the counts of one run.
type sizes struct {
	tasks           int           // embedded and peer burn-down
	latency         time.Duration // of the steady embedded stream
	rate            float64       // its tasks a second
	emuLatency      time.Duration
	emuRate         float64
	requests        int // schedule API requests
	costTasks       int // tasks per AWS cost case
	idleInvocations int // of the idle consumer function
	scheduleConc    int
	waiters         int           // concurrent waits for a result
	periodic        time.Duration // how long the periodic schedules fire
	grown           int           // finished tasks in the table before the grown burn-down
	scale           []int         // lambdas of the idle environments the scale part measures
}

// periodicSchedules is how many rate(1s) schedules the periodic part runs.
const periodicSchedules = 50

var (
	full  = sizes{tasks: 100_000, latency: 20 * time.Second, rate: 1000, emuLatency: 30 * time.Second, emuRate: 10, requests: 20_000, costTasks: 500, idleInvocations: 10, scheduleConc: 8, waiters: 1000, periodic: 30 * time.Second, grown: 1_000_000, scale: scaleLambdas}
	quick = sizes{tasks: 10_000, latency: 5 * time.Second, rate: 1000, emuLatency: 5 * time.Second, emuRate: 10, requests: 4_000, costTasks: 100, idleInvocations: 3, scheduleConc: 8, waiters: 1000, periodic: 10 * time.Second, grown: 250_000, scale: scaleLambdas}
	// smoke runs every part with tiny counts: it checks that the bench runs and prints its
	// table (make bench-smoke, in CI), and measures nothing worth reading.
	smoke = sizes{tasks: 200, latency: time.Second, rate: 100, emuLatency: 2 * time.Second, emuRate: 5, requests: 200, costTasks: 10, idleInvocations: 1, scheduleConc: 4, waiters: 20, periodic: 3 * time.Second, grown: 2_000, scale: []int{10}}
)

func main() {
	quickFlag := flag.Bool("quick", false, "smaller counts (make bench QUICK=1)")
	smokeFlag := flag.Bool("smoke", false, "tiny counts, to check that every part runs and the table is printed (make bench-smoke)")
	concurrency := flag.Int("concurrency", 16, "handler slots of atf's lambda, and the peers' workers")
	out := flag.String("out", "bench/results.json", "where to write the results")
	peers := flag.String("peers", "bench/peers", "the peers' module; skipped if missing")
	regPath := flag.String("registry", registry.File, "the lambda registry whose lambdas the idle consumer sweeps")
	envPath := flag.String("environments", "infra/environments.json", "the environments, for the shard count of dev")
	emuRate := flag.Float64("emulated-rate", 0, "tasks a second of the latency run on the emulators; 0 for the default")
	templatePath := flag.String("template", "cdk.out/atf-dev.template.json", "the synthesized dev core template; the idle bill prices its standing charges and those of the lambda stacks beside it (atf-dev-*.template.json)")
	only := flag.String("only", "", "run only these parts, comma-separated: throughput, grown, peers, latency, schedule, wait, periodic, aws, idle, scale")
	tasks := flag.Int("tasks", 0, "tasks of the burn-down (embedded and peers); 0 for the default of the run's size")
	prof := profileFlags()
	flag.Parse()
	stopProfiles, err := prof.start()
	if err != nil {
		log.Fatalf("profile: %v", err)
	}
	defer stopProfiles()
	part := func(name string) bool { return *only == "" || slices.Contains(strings.Split(*only, ","), name) }
	log.SetFlags(0)
	log.SetPrefix("bench: ")
	sz := full
	switch {
	case *smokeFlag:
		sz = smoke
	case *quickFlag:
		sz = quick
	}
	if *emuRate > 0 {
		sz.emuRate = *emuRate
	}
	if *tasks > 0 {
		sz.tasks = *tasks
	}
	ctx := context.Background()
	began := time.Now()
	r := Results{Quick: *quickFlag, Smoke: *smokeFlag, Started: began.UTC().Format("2006-01-02 15:04 UTC"), Machine: machine(), Prices: currentPrices()}

	var grown *grownStore
	if part("grown") {
		log.Printf("grown store: writing %d finished tasks", sz.grown)
		if grown, err = fillGrown(ctx, sz.grown); err != nil {
			log.Fatalf("grown store: %v", err)
		}
		defer grown.remove()
	}
	if part("throughput") {
		log.Printf("embedded throughput: %d tasks, concurrency %d", sz.tasks, *concurrency)
		if r.Throughput, err = embeddedThroughput(ctx, sz.tasks, *concurrency); err != nil {
			log.Fatalf("embedded throughput: %v", err)
		}
		r.AtfEmbeddedTasksPerS, r.AtfPeakRSSMB = r.Throughput.TasksPerS, r.Throughput.PeakRSSMB
		log.Printf("embedded throughput: %.0f tasks/s, peak RSS %.0f MB", r.AtfEmbeddedTasksPerS, r.Throughput.PeakRSSMB)
	}
	if grown != nil {
		log.Printf("grown store: %d tasks on %d finished ones and on empty stores, in %d rounds, concurrency %d", sz.tasks, sz.grown, grownRounds, *concurrency)
		g, err := grown.compare(ctx, sz.tasks, *concurrency)
		grown.remove()
		if err != nil {
			log.Fatalf("grown store: %v", err)
		}
		r.Grown, r.AtfGrownTasksPerS = &g, g.TasksPerS
		log.Printf("grown store: %.0f tasks/s, %.2f × the empty stores'", g.TasksPerS, g.Ratio)
	}
	r.PeersNote = "not asked for"
	if part("peers") {
		if p, note := runPeers(ctx, *peers, sz.tasks, *concurrency); p != nil {
			r.Peers, r.RiverTasksPerS, r.AsynqTasksPerS, r.PeersNote = p, &p.RiverTasksPerS, &p.AsynqTasksPerS, ""
		} else {
			r.PeersNote = note
			log.Printf("peers: not run (%s)", note)
		}
	}
	if part("latency") {
		log.Printf("embedded latency: %.0f tasks/s for %s", sz.rate, sz.latency)
		if r.Latency, err = embeddedLatency(ctx, sz.rate, sz.latency, *concurrency); err != nil {
			log.Fatalf("embedded latency: %v", err)
		}
		r.AtfEmbeddedLatencyP50MS, r.AtfEmbeddedLatencyP95MS, r.AtfEmbeddedLatencyP99MS = r.Latency.Latency.P50, r.Latency.Latency.P95, r.Latency.Latency.P99
	}
	if part("schedule") {
		log.Printf("schedule API: %d requests", sz.requests)
		if r.Schedule, err = scheduleThroughput(ctx, sz.requests, sz.scheduleConc); err != nil {
			log.Fatalf("schedule API: %v", err)
		}
		r.ScheduleRequestsPerS = r.Schedule.RequestsPerS
	}
	if part("wait") {
		log.Printf("embedded wait for a result: %d waiters", sz.waiters)
		if r.Wait, err = embeddedWait(ctx, sz.waiters, *concurrency); err != nil {
			log.Fatalf("embedded wait: %v", err)
		}
		r.AtfEmbeddedWaitP99MS = r.Wait.Latency.P99
	}
	if part("periodic") {
		log.Printf("embedded periodic schedules: %d rate(1s) for %s", periodicSchedules, sz.periodic)
		if r.Periodic, err = embeddedPeriodic(ctx, periodicSchedules, sz.periodic, *concurrency); err != nil {
			log.Fatalf("embedded periodic: %v", err)
		}
	}
	r.AWSNote = "not asked for"
	if part("aws") {
		r.AWSNote = ""
		if err := runAWS(ctx, &r, sz, *concurrency); err != nil {
			log.Fatalf("AWS: %v", err)
		}
	}
	if part("idle") {
		if err := runIdle(ctx, &r, sz, *regPath, *envPath, *templatePath); err != nil {
			log.Fatalf("idle: %v", err)
		}
	}

	if part("scale") {
		if err := runScale(ctx, &r, sz, *envPath); err != nil {
			log.Fatalf("scale: %v", err)
		}
	}

	r.WallS = time.Since(began).Seconds()
	r.judge()
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	r.Print(os.Stdout)
	fmt.Printf("\nwrote %s in %.0f s\n", *out, r.WallS)
}

// runAWS measures on the emulators: latency through the function handlers and the cost cases,
// and prices a month of a steady 10,000 tasks a second from the headline case.
// Without emulators it notes why and measures nothing.
func runAWS(ctx context.Context, r *Results, sz sizes, concurrency int) error {
	cfg, err := awsConfig(ctx)
	if err != nil {
		r.AWSNote = err.Error()
		log.Printf("AWS: not measured: %v", err)
		return nil
	}
	if sz.emuLatency == 0 {
		return nil
	}
	log.Printf("emulated latency: %.0f tasks/s for %s", sz.emuRate, sz.emuLatency)
	lat, err := emulatedLatency(ctx, cfg, sz.emuRate, sz.emuLatency, concurrency)
	if err != nil {
		return fmt.Errorf("emulated latency: %w", err)
	}
	r.Emulated, r.AtfEmulatedLatencyP95MS = &lat, lat.Latency.P95

	// The benchmark's lambda as a team would declare it; the registry fills in the function's
	// memory and batch size.
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "` + lambdaName + `", "concurrency": 10}]}`))
	if err != nil {
		return err
	}
	h, err := newHarness(ctx, cfg, reg.Lambdas[0])
	if err != nil {
		return err
	}
	defer h.close()
	if _, err := h.runCase(ctx, costCase{Name: "warmup", Batch: 10}, 10); err != nil { // queue URLs, connections
		return err
	}
	for _, c := range costCases {
		log.Printf("AWS cost: %s, %d tasks", c.Title, sz.costTasks)
		res, err := h.runCase(ctx, c, sz.costTasks)
		if err != nil {
			return err
		}
		r.Cases = append(r.Cases, res)
	}
	r.USDPerMillionImmediate, r.USDPerMillionSingle = r.Cases[0].TotalPerMillon, r.Cases[1].TotalPerMillon
	r.USDPerMillionDelayed1h, r.USDPerMillionTwoRetries = r.Cases[2].TotalPerMillon, r.Cases[3].TotalPerMillon
	r.AWSCallsPerImmediateTask = map[string]float64{}
	for op, x := range r.Cases[0].Calls {
		r.AWSCallsPerImmediateTask[op] = x.Calls
	}
	steady := steadyBill(r.Cases[0].Title, r.Cases[0].Usage, steadyTasksPerS, len(h.lambda.Priorities))
	r.Steady, r.USDPerMonth10kOnDemand, r.USDPerMonth10kProvisioned = &steady, steady.OnDemand, steady.Provisioned

	return nil
}

// costCases are the cases, in the order results.json and the table list them.
var costCases = []costCase{
	{Name: "immediate_batch", Title: "immediate, scheduled in batches of 100", Batch: 100,
		Explain: "runs at once; the API function takes 100 tasks per request"},
	{Name: "immediate_single", Title: "immediate, scheduled one per request", Batch: 1,
		Explain: "runs at once; one API request, and one API function invocation, per task"},
	{Name: "delayed_1h", Title: "delayed by one hour, in batches of 100", Batch: 100, Delay: "1h",
		Explain: "scheduled with delay 1h; the harness's clock then jumps the hour, so the consumer finds the tasks due"},
	{Name: "two_retries", Title: "two retries, in batches of 100", Batch: 100, Failures: 2,
		Explain: "the handler fails the first two attempts retriably; the third succeeds after the default backoff"},
}

// environment is what the bench reads of an environment of infra/environments.json.
type environment struct {
	Shards           int       `json:"shards"`
	LogRetentionDays int       `json:"log_retention_days"`
	NATGateways      int       `json:"nat_gateways"`
	Alarms           *struct{} `json:"alarms"` // nil: no alarms
}

func loadEnvironments(path string) (map[string]environment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var envs map[string]environment
	if err := json.Unmarshal(data, &envs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return envs, nil
}

// devShards reads the shard count of environment dev.
func devShards(path string) (int, error) {
	envs, err := loadEnvironments(path)
	if err != nil {
		return 0, err
	}
	return envs["dev"].Shards, nil
}

// runPeers runs the peers' module with the same workload, if it is there and its servers are up.
func runPeers(ctx context.Context, dir string, tasks, concurrency int) (*PeerResult, string) {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return nil, dir + " missing"
	}
	if os.Getenv("ATF_BENCH_PG") == "" || os.Getenv("ATF_BENCH_REDIS") == "" {
		return nil, "ATF_BENCH_PG or ATF_BENCH_REDIS not set: start bench/peers/services"
	}
	log.Printf("peers: River and asynq, %d tasks, concurrency %d", tasks, concurrency)
	cmd := exec.CommandContext(ctx, "go", "-C", dir, "run", ".", "-tasks", strconv.Itoa(tasks), "-concurrency", strconv.Itoa(concurrency))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, "the peers failed: " + err.Error()
	}
	var last string
	for sc := bufio.NewScanner(&stdout); sc.Scan(); {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	var p PeerResult
	if err := json.Unmarshal([]byte(last), &p); err != nil {
		return nil, "the peers' last line is not JSON: " + err.Error()
	}
	if p.Tasks != tasks || p.Concurrency != concurrency {
		return nil, fmt.Sprintf("the peers ran %d tasks at concurrency %d, not %d at %d", p.Tasks, p.Concurrency, tasks, concurrency)
	}
	return &p, ""
}

// machine describes this computer from /proc.
func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: strings.TrimPrefix(runtime.Version(), "go")}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGB = kb / (1 << 20)
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}
