//go:build tools

// Package tools records the kwok commands built by deploy/local/cluster.sh.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
