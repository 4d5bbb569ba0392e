package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// A diamond: a, then b and c side by side, then d, which receives b's and c's results. d is a
// task of another lambda than the batch's, join; the others are echo's.
func ExampleGraph() {
	g := &client.Graph{Lambda: "echo"}
	a := g.Add(client.ScheduleRequest{ID: "a", Payload: json.RawMessage(`{"text":"a"}`)})
	d := g.Chord([]task.Ref{a},
		[]client.ScheduleRequest{{ID: "b", Payload: json.RawMessage(`{"text":"b"}`)}, {ID: "c", Payload: json.RawMessage(`{"text":"c"}`)}},
		client.ScheduleRequest{ID: "d", Lambda: "join"})
	for _, req := range g.Requests() {
		fmt.Println(req.ID, "after", req.After)
	}
	fmt.Println("last:", d)
	// Output:
	// a after []
	// b after [echo/a]
	// c after [echo/a]
	// d after [echo/b echo/c]
	// last: join/d
}

// One request schedules the graph's tasks, or none. Sent again, the same graph replays: created is
// false and nothing is scheduled twice. (Not run: it needs an atf API.)
func ExampleClient_ScheduleGraph() {
	ctx := context.Background()
	c := &client.Client{Endpoint: "http://127.0.0.1:8080"}
	g := &client.Graph{Lambda: "echo"}
	g.Chain(nil, client.ScheduleRequest{ID: "first"}, client.ScheduleRequest{ID: "second"})
	tasks, created, err := c.ScheduleGraph(ctx, g)
	if err != nil {
		// A cycle, or an upstream that does not exist, is a *client.Error of status 422.
		log.Fatal(err)
	}
	fmt.Println(len(tasks), "tasks, created:", created) // second is pending until first succeeds

	// Later, what waits for first:
	downs, _, err := c.Downstreams(ctx, "echo", "first", "", 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range downs {
		fmt.Println(d.Lambda, d.ID, d.Status)
	}
}

// A chain: each task runs once the one before it succeeded. Tasks without an id get one.
func ExampleGraph_Chain() {
	g := &client.Graph{Lambda: "etl"}
	steps := g.Chain(nil,
		client.ScheduleRequest{ID: "extract"},
		client.ScheduleRequest{ID: "transform"},
		client.ScheduleRequest{ID: "load", Lambda: "loader"},
	)
	fmt.Println(steps)
	fmt.Println(g.Requests()[2].After)
	// Output:
	// [etl/extract etl/transform loader/load]
	// [etl/transform]
}

// A chord whose callback runs once its header has ended, however each task of it ended: the
// callback's handler reads each upstream's status, result and error (worker.Task.Inputs).
func ExampleGraph_Chord() {
	g := &client.Graph{Lambda: "resize"}
	var header []client.ScheduleRequest
	for _, img := range []string{"1.png", "2.png", "3.png"} {
		header = append(header, client.ScheduleRequest{Payload: json.RawMessage(fmt.Sprintf(`{"image":%q}`, img))})
	}
	report := g.Chord(nil, header, client.ScheduleRequest{ID: "report", TriggerRule: task.TriggerAllDone})
	last := g.Requests()[len(header)]
	fmt.Println(report, "waits for", len(last.After), "tasks, trigger rule", last.TriggerRule)
	// Output:
	// resize/report waits for 3 tasks, trigger rule all_done
}

// A deployed API: its routes authorize with IAM, so each request is signed with SigV4, with the
// credentials of the SDK's default chain (environment, profile, SSO, instance role). (Not run:
// it needs a deployed API.)
func ExampleClient_sigV4() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		log.Fatal(err)
	}
	c := &client.Client{Endpoint: "https://abc123.execute-api.eu-west-1.amazonaws.com", SigV4: &cfg}
	lambdas, err := c.Lambdas(ctx)
	if err != nil {
		log.Fatal(err) // such as: API Gateway refused execute-api:Invoke on GET /v1/lambdas: User: arn:... is not authorized ...
	}
	fmt.Println(len(lambdas), "lambdas")
}
