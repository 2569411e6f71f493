//go:build tools

// Package tools records the oras command the interop tests push and pull plugins with.
package tools

import (
	_ "oras.land/oras/cmd/oras"
)
