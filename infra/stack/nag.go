package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// applyNag runs cdk-nag's AwsSolutions checks on the stack: a finding that is not suppressed
// below is an error annotation, which fails `cdk synth` and the tests. Every suppression is on
// the resources it concerns, with its reason.
func applyNag(d *deployment) {
	awscdk.Aspects_Of(d.stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
}

// suppress records that rule does not apply to scope and its children, and why. appliesTo
// narrows it to findings such as "Resource::*"; a finding written /like this/ is a regular
// expression.
func suppress(scope constructs.IConstruct, rule, reason string, appliesTo ...string) {
	s := &cdknag.NagPackSuppression{Id: jsii.String(rule), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		var to []any
		for _, a := range appliesTo {
			if len(a) > 1 && a[0] == '/' {
				to = append(to, &cdknag.RegexAppliesTo{Regex: jsii.String(a)})
			} else {
				to = append(to, a)
			}
		}
		s.AppliesTo = &to
	}
	cdknag.NagSuppressions_AddResourceSuppressions(scope, &[]*cdknag.NagPackSuppression{s}, jsii.Bool(true))
}
