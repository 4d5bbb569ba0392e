package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// apiGatewayHost is the host of an API Gateway endpoint, ID.execute-api.REGION.amazonaws.com,
// with its region.
var apiGatewayHost = regexp.MustCompile(`^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)

// sigV4Config returns the AWS configuration that signs the client's requests to endpoint
// (client.Client.SigV4), or nil when they go unsigned. A deployed API authorizes every route with
// IAM, so requests to an API Gateway host are signed; ATF_SIGV4=1 signs them for any endpoint,
// such as a proxy on loopback. The region is region (--region), else the API Gateway host's
// (API Gateway refuses a signature for any other: an AWS_REGION left for other work must not
// win), else AWS_REGION, else the profile's; the credentials are the SDK's default chain
// (environment, profile, SSO, instance role), looked up by the first request.
func sigV4Config(ctx context.Context, endpoint, region string) (*aws.Config, error) {
	var hostRegion string
	if u, err := url.Parse(endpoint); err == nil {
		if m := apiGatewayHost.FindStringSubmatch(strings.ToLower(u.Hostname())); m != nil {
			hostRegion = m[1]
		} else if os.Getenv("ATF_SIGV4") != "1" {
			return nil, nil
		}
	} else if os.Getenv("ATF_SIGV4") != "1" {
		return nil, nil
	}
	var opts []func(*config.LoadOptions) error
	if r := cmp.Or(region, hostRegion, os.Getenv("AWS_REGION")); r != "" {
		opts = append(opts, config.WithRegion(r))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("the AWS configuration to sign requests to %s with: %w", endpoint, err)
	}
	return &cfg, nil
}
