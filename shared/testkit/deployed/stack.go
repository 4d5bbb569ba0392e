// Package deployed reads what a CloudFormation deployment of an atf stack created, and checks it
// against the synthesized template through the AWS API: test tooling for `make deploy-local`
// (the dev stack deployed into moto by localstack/deploy-local), not part of atf.
//
// Read returns the stack's outputs and the physical name of every resource by its logical id,
// the names a test of the deployed stack uses (the table, the queues, the functions, the event
// source mappings, the rule). Check verifies, for every resource the template declares, that it
// exists under that name with the template's key settings, or that its type is one the emulator
// does not create (notApplied) or the check does not verify (notVerified), each named with its
// reason. A type on no list fails the check: nothing is skipped silently.
package deployed

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
)

// Template is a synthesized CloudFormation template (cdk.out/atf-<env>.template.json).
type Template struct {
	Resources map[string]TemplateResource `json:"Resources"`
	Outputs   map[string]struct {
		Value any `json:"Value"`
	} `json:"Outputs"`
}

// TemplateResource is one resource of a Template.
type TemplateResource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
}

// LoadTemplate reads a template file.
func LoadTemplate(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(t.Resources) == 0 {
		return nil, fmt.Errorf("%s: no resources", path)
	}
	return &t, nil
}

// LogicalIDs returns the logical ids of the template's resources of type typ, sorted.
func (t *Template) LogicalIDs(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Stack is what a deployment created, as CloudFormation describes it.
type Stack struct {
	Name    string
	Outputs map[string]string
	// Resources are the resources the stack created, by logical id. An emulator that does not
	// implement a type (moto) lists no resource of it, or one without a type: those are left out.
	Resources map[string]Resource
}

// Resource is one created resource: its type and physical id (a queue's URL, a function's,
// table's, role's or rule's name, an event source mapping's UUID; empty for a permission on moto).
type Resource struct {
	Type       string
	PhysicalID string
}

// Stack outputs of every atf stack (infra/stack/stack.go).
const (
	OutputTableName   = "TableName"
	OutputQueuePrefix = "QueuePrefix"
	OutputAPIURL      = "ApiUrl"
	OutputLambdasPath = "LambdasPath" // of the core stack: the SSM path of the lambda stacks' parameters
)

// Read describes the stack name: its outputs and resources.
func Read(ctx context.Context, cf *cloudformation.Client, name string) (*Stack, error) {
	out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
	if err != nil {
		return nil, fmt.Errorf("describe stack %s: %w", name, err)
	}
	if len(out.Stacks) != 1 {
		return nil, fmt.Errorf("describe stack %s: %d stacks", name, len(out.Stacks))
	}
	st := &Stack{Name: name, Outputs: map[string]string{}, Resources: map[string]Resource{}}
	for _, o := range out.Stacks[0].Outputs {
		st.Outputs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	// DescribeStackResources returns them all at once (up to 100 on AWS, every one on moto);
	// ListStackResources pages, so it is what reads a stack of any size.
	p := cloudformation.NewListStackResourcesPaginator(cf, &cloudformation.ListStackResourcesInput{StackName: aws.String(name)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list resources of stack %s: %w", name, err)
		}
		for _, r := range page.StackResourceSummaries {
			id, typ, phys := aws.ToString(r.LogicalResourceId), aws.ToString(r.ResourceType), aws.ToString(r.PhysicalResourceId)
			if id == "" || typ == "" {
				continue // moto's record of a resource it did not create
			}
			st.Resources[id] = Resource{Type: typ, PhysicalID: phys}
		}
	}
	return st, nil
}

// Physical returns the physical id of the resource logicalID, or "" if the stack has none.
func (s *Stack) Physical(logicalID string) string { return s.Resources[logicalID].PhysicalID }

// Table is the name of the stack's table (output TableName).
func (s *Stack) Table() string { return s.Outputs[OutputTableName] }

// QueuePrefix is the prefix of the stack's queue names (output QueuePrefix).
func (s *Stack) QueuePrefix() string { return s.Outputs[OutputQueuePrefix] }

// QueueURLs returns the URL of every queue the stack created, by queue name.
func (s *Stack) QueueURLs() map[string]string {
	out := map[string]string{}
	for _, r := range s.Resources {
		if r.Type == "AWS::SQS::Queue" {
			out[r.PhysicalID[strings.LastIndex(r.PhysicalID, "/")+1:]] = r.PhysicalID
		}
	}
	return out
}
