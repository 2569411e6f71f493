//go:build tools

// Package tools records the helm command that lints and renders deploy/helm/wasmop.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
