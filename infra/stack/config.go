package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"

	"github.com/openatf/atf/shared/store/dynamostore"
)

// Environment is the configuration of one environment (one stack), an entry of the file that
// cdk.json's context names (infra/environments.json). Every field is required unless it says
// otherwise, so that a reader of the file sees the whole environment.
type Environment struct {
	// Account and Region place the stack. Empty: the account and region of the credentials the
	// CDK CLI runs with (CDK_DEFAULT_ACCOUNT, CDK_DEFAULT_REGION), or, without credentials, an
	// environment-agnostic stack, which is how `make synth` runs offline.
	Account string `json:"account"`
	Region  string `json:"region"`
	// Shards is ATF_SHARDS, the index shards per lambda (see docs/capacity.md), at most
	// dynamostore.MaxShards. It may grow between deployments, never shrink.
	Shards int `json:"shards"`
	// LogRetentionDays keeps every log group (functions, executors, API access logs) this long.
	LogRetentionDays int `json:"log_retention_days"`
	// PITR turns on the table's point-in-time recovery.
	PITR bool `json:"pitr"`
	// Retain keeps the table and the log groups when the stack is deleted (or a resource
	// replaced); without it they are destroyed with the stack.
	Retain bool `json:"retain"`
	// API throttles every route of the API: requests per second and burst.
	API struct {
		RateLimit  int `json:"rate_limit"`
		BurstLimit int `json:"burst_limit"`
	} `json:"api"`
	// NATGateways serve the ECS executors' private subnets (unused without ECS lambdas): one is
	// cheaper, one per availability zone survives the loss of a zone. Zero (dev's default): no
	// NAT gateway and no private subnet; the executors run in public subnets with a public IPv4
	// address each, which they use for egress only (their security group admits nothing). A NAT
	// gateway costs about $33 a month and its address $3.65 before any traffic; an executor's
	// address costs $3.65 a month while it runs, and executors scale to zero when idle.
	NATGateways int `json:"nat_gateways"`
	// ContainerInsights turns on CloudWatch Container Insights for the executors' cluster; off if
	// absent. Its metrics are billed as custom metrics for every hour an executor runs
	// (docs/capacity.md): on in staging and prod, off in dev.
	ContainerInsights bool `json:"container_insights,omitempty"`
	// Alarms, nil for none (no topic, no alarms; the dashboard still shows the metrics).
	Alarms *Alarms `json:"alarms"`
	// ReservedConcurrency reserves Lambda concurrency for the consumer (one) and each status
	// function (statusReserved), so that worker scale-out cannot throttle claims and
	// heartbeats. Off (dev's default), no function reserves any: the environment deploys into
	// an account whose limit is too low to reserve anything (a new account's 10), and its
	// functions share the account's unreserved concurrency (docs/capacity.md).
	// Required in the environments file, though false is its zero (LoadEnvironments).
	ReservedConcurrency bool `json:"reserved_concurrency"`
	// AccountConcurrency is the Lambda concurrency limit of the account and region the stack
	// deploys to, at least MinAccountConcurrency; optional, AWS's default
	// DefaultAccountConcurrency if zero. Where ReservedConcurrency is on, the stack refuses a
	// registry whose functions could take more (see checkConcurrency), and environments placed
	// in one account share it (CheckSharedAccounts).
	AccountConcurrency int `json:"account_concurrency,omitempty"`
	// StatusConcurrency is the status function's reserved concurrency where ReservedConcurrency
	// is on; optional, sized from the registry if zero (see statusReserved).
	StatusConcurrency int `json:"status_concurrency,omitempty"`
	// Events, optional: nil (or absent) publishes no lifecycle events. Set, the stack makes the
	// environment's event bus (events.go) and the functions that write the table publish every
	// task's events to it, at $1.00 per million events (docs/capacity.md).
	Events *Events `json:"events,omitempty"`
	// Capacity is how the table and its indexes are billed; optional: nil (or absent) is on
	// demand. Provisioned capacity with auto scaling costs less under a steady load, and throttles
	// a burst that outruns its scaling (docs/capacity.md, "A steady 10,000 tasks a second").
	Capacity *Capacity `json:"capacity,omitempty"`
	// SendFirst, optional, true if absent: the API function sends the message of a task due
	// within 15 minutes before it writes the task (ATF_SEND_FIRST; docs/guarantees.md, "Send,
	// then write"). Set it false before upgrading an environment whose workers predate it (their
	// claims do not forward the message's nonce), and true again once every worker is rebuilt.
	SendFirst *bool `json:"send_first,omitempty"`
}

// The capacity modes of the table.
const (
	CapacityOnDemand    = "on_demand"
	CapacityProvisioned = "provisioned"
)

// Capacity configures the table's capacity mode. On demand it has no other field. Provisioned,
// the table and each of its indexes has its own read and write capacity, which Application Auto
// Scaling moves between Min and Max to keep the consumed units at TargetUtilizationPercent of it.
type Capacity struct {
	Mode  string         `json:"mode"`
	Read  *CapacityRange `json:"read,omitempty"`
	Write *CapacityRange `json:"write,omitempty"`
	// TargetUtilizationPercent is 20 to 90, the range DynamoDB's target tracking takes.
	TargetUtilizationPercent int `json:"target_utilization_percent,omitempty"`
}

// CapacityRange bounds the provisioned capacity units of the table and of each index: a new
// table starts at Min.
type CapacityRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// The target utilizations that DynamoDB's auto scaling accepts, in percent.
const (
	MinTargetUtilization = 20
	MaxTargetUtilization = 90
)

// provisioned is e's provisioned capacity, or nil if its table is billed on demand.
func (e Environment) provisioned() *Capacity {
	if e.Capacity == nil || e.Capacity.Mode != CapacityProvisioned {
		return nil
	}
	return e.Capacity
}

// validate names the first field of c that is wrong.
func (c *Capacity) validate() error {
	switch c.Mode {
	case CapacityOnDemand:
		if c.Read != nil || c.Write != nil || c.TargetUtilizationPercent != 0 {
			return fmt.Errorf("capacity: read, write and target_utilization_percent are for mode %q only", CapacityProvisioned)
		}
		return nil
	case CapacityProvisioned:
	default:
		return fmt.Errorf("capacity.mode %q: want %q or %q", c.Mode, CapacityOnDemand, CapacityProvisioned)
	}
	for _, f := range []struct {
		name string
		r    *CapacityRange
	}{{"read", c.Read}, {"write", c.Write}} {
		name, r := f.name, f.r
		switch {
		case r == nil:
			return fmt.Errorf("capacity.%s is missing: mode %q needs {\"min\": ..., \"max\": ...} capacity units", name, CapacityProvisioned)
		case r.Min < 1 || r.Max < r.Min:
			return fmt.Errorf("capacity.%s: want 1 ≤ min ≤ max, got min %d and max %d", name, r.Min, r.Max)
		}
	}
	if t := c.TargetUtilizationPercent; t < MinTargetUtilization || t > MaxTargetUtilization {
		return fmt.Errorf("capacity.target_utilization_percent must be in %d..%d, got %d", MinTargetUtilization, MaxTargetUtilization, t)
	}
	return nil
}

// sendFirst is SendFirst, with its default.
func (e Environment) sendFirst() bool { return e.SendFirst == nil || *e.SendFirst }

// Events configures the lifecycle events of an environment.
type Events struct {
	// ArchiveRetentionDays keeps every event in the bus's archive this long, for replay: at
	// least 1.
	ArchiveRetentionDays int `json:"archive_retention_days"`
}

// DefaultAccountConcurrency is AWS Lambda's default concurrency limit of an account and region.
// MinAccountConcurrency is the least limit an account has: a new account's.
const (
	DefaultAccountConcurrency = 1000
	MinAccountConcurrency     = 10
)

// AccountLimit is e's AccountConcurrency or its default.
func (e Environment) AccountLimit() int {
	if e.AccountConcurrency == 0 {
		return DefaultAccountConcurrency
	}
	return e.AccountConcurrency
}

// Alarms configures the alarms of an environment. An alarm fires when its value reaches its
// threshold over one period of 5 minutes, and notifies the environment's SNS topic: the core's
// atf-<env>-alarms, or TopicARN.
type Alarms struct {
	// Email, if set, subscribes this address to the alarm topic the core makes.
	Email string `json:"email"`
	// TopicARN, optional, is an existing SNS topic, of the environment's region, that the alarms
	// notify instead (one a team already watches); the stacks then make no topic. With neither
	// it nor Email, nobody is subscribed: the core outputs its topic's ARN, and make doctor
	// (make deploy) warns.
	TopicARN string `json:"topic_arn,omitempty"`
	// DLQMessages: messages in one lambda's dead-letter queues.
	DLQMessages int `json:"dlq_messages"`
	// DeadTasks: tasks of one lambda that ended dead (retries exhausted).
	DeadTasks int `json:"dead_tasks"`
	// DeliveryP95Ms: the 95th percentile, per lambda, of the delay between a task's due time and
	// its claim, in milliseconds.
	DeliveryP95Ms int `json:"delivery_p95_ms"`
	// ConsumerErrors: failed invocations of the consumer function (each one a minute in which
	// no sweep succeeded).
	ConsumerErrors int `json:"consumer_errors"`
	// StatusThrottles and StatusErrors: throttled and failed invocations of the status function
	// (each one a claim, heartbeat or result that failed); optional, 1 if zero.
	StatusThrottles int `json:"status_throttles,omitempty"`
	StatusErrors    int `json:"status_errors,omitempty"`
	// StoreErrors: calls to the table that failed for a reason of the table's own (throttled,
	// timed out, unreachable), over every function and executor; optional, 1 if zero.
	StoreErrors int `json:"store_errors,omitempty"`
}

// orOne is n, or 1 if n is zero: the threshold of an optional alarm.
func orOne(n int) int { return max(n, 1) }

var (
	envNamePattern = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)
	accountPattern = regexp.MustCompile(`^[0-9]{12}$`)
	regionPattern  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]$`)
	emailPattern   = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
	topicPattern   = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z]{2}(-[a-z]+)+-[0-9]:[0-9]{12}:[A-Za-z0-9_-]{1,256}$`)
)

// logRetentions are the retention periods CloudWatch Logs accepts, in days, and CDK's names.
var logRetentions = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

// LoadEnvironments reads the environments file at path: a JSON object from environment name
// (such as dev) to Environment. Unknown fields are errors.
func LoadEnvironments(path string) (map[string]Environment, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var envs map[string]Environment
	if err := dec.Decode(&envs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(envs) == 0 {
		return nil, fmt.Errorf("%s: no environment", path)
	}
	// Required though a bool: a file written before it existed would otherwise drop the
	// reservations of its staging and prod without a word.
	var fields map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if _, ok := fields[name]["reserved_concurrency"]; !ok {
			return nil, fmt.Errorf("%s: environment %s: reserved_concurrency is missing: true reserves concurrency for the consumer and the status functions (as staging and prod do), false reserves none (dev, or an account whose limit is too low)", path, name)
		}
	}
	for name, e := range envs {
		if err := e.Validate(name); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return envs, nil
}

// Validate names the first field of the environment called name that is wrong.
func (e Environment) Validate(name string) error {
	switch {
	case !envNamePattern.MatchString(name):
		return fmt.Errorf("environment %q: name: use 1 to 16 of a-z and 0-9, starting with a letter", name)
	case e.Account != "" && !accountPattern.MatchString(e.Account):
		return fmt.Errorf("environment %s: account %q: want 12 digits, or empty", name, e.Account)
	case e.Region != "" && !regionPattern.MatchString(e.Region):
		return fmt.Errorf("environment %s: region %q: want a region such as us-east-1, or empty", name, e.Region)
	case e.Shards < 1 || e.Shards > dynamostore.MaxShards:
		// The functions' store refuses more at cold start (dynamostore.Config.Validate).
		return fmt.Errorf("environment %s: shards must be in 1..%d (dynamostore.MaxShards), got %d", name, dynamostore.MaxShards, e.Shards)
	case logRetentions[e.LogRetentionDays] == "":
		return fmt.Errorf("environment %s: log_retention_days %d: want one of %v", name, e.LogRetentionDays, slices.Sorted(maps.Keys(logRetentions)))
	case e.API.RateLimit < 1 || e.API.BurstLimit < 1:
		return fmt.Errorf("environment %s: api.rate_limit and api.burst_limit must be at least 1, got %d and %d", name, e.API.RateLimit, e.API.BurstLimit)
	case e.NATGateways < 0 || e.NATGateways > maxAZs:
		return fmt.Errorf("environment %s: nat_gateways must be in 0..%d, got %d", name, maxAZs, e.NATGateways)
	case e.AccountConcurrency < 0 || e.AccountConcurrency != 0 && e.AccountConcurrency < MinAccountConcurrency:
		return fmt.Errorf("environment %s: account_concurrency must be at least %d, or 0 for AWS's default %d, got %d", name, MinAccountConcurrency, DefaultAccountConcurrency, e.AccountConcurrency)
	case e.StatusConcurrency < 0:
		return fmt.Errorf("environment %s: status_concurrency must not be negative, got %d", name, e.StatusConcurrency)
	}
	if e.Capacity != nil {
		if err := e.Capacity.validate(); err != nil {
			return fmt.Errorf("environment %s: %w", name, err)
		}
	}
	if e.Events != nil && e.Events.ArchiveRetentionDays < 1 {
		return fmt.Errorf("environment %s: events.archive_retention_days must be at least 1, got %d", name, e.Events.ArchiveRetentionDays)
	}
	if a := e.Alarms; a != nil {
		switch {
		case a.Email != "" && !emailPattern.MatchString(a.Email):
			return fmt.Errorf("environment %s: alarms.email %q is not an email address", name, a.Email)
		case a.TopicARN != "" && !topicPattern.MatchString(a.TopicARN):
			return fmt.Errorf("environment %s: alarms.topic_arn %q is not an SNS topic's ARN (a standard topic: arn:aws:sns:<region>:<account>:<name>)", name, a.TopicARN)
		case a.TopicARN != "" && a.Email != "":
			return fmt.Errorf("environment %s: alarms: set email or topic_arn, not both (subscribe the address to the topic %s instead)", name, a.TopicARN)
		case a.TopicARN != "" && e.Region != "" && strings.Split(a.TopicARN, ":")[3] != e.Region:
			return fmt.Errorf("environment %s: alarms.topic_arn %q: the topic must be in the environment's region %s, where its alarms are", name, a.TopicARN, e.Region)
		case a.DLQMessages < 1, a.DeadTasks < 1, a.DeliveryP95Ms < 1, a.ConsumerErrors < 1:
			return fmt.Errorf("environment %s: alarms: dlq_messages, dead_tasks, delivery_p95_ms and consumer_errors must be at least 1", name)
		case a.StatusThrottles < 0, a.StatusErrors < 0:
			return fmt.Errorf("environment %s: alarms: status_throttles and status_errors must not be negative", name)
		}
	}
	return nil
}

// logRetention is e's LogRetentionDays as CDK's enum.
func (e Environment) logRetention() awslogs.RetentionDays {
	return logRetentions[e.LogRetentionDays]
}
