//go:build tools

// Package tools records the cosign command the signature tests sign plugins with.
package tools

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
