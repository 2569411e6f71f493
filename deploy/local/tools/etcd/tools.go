//go:build tools

// Package tools records the etcd server built by deploy/local/cluster.sh.
package tools

import _ "go.etcd.io/etcd/server/v3"
