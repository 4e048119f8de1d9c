//go:build tools

// Package testenv only pins the two programs KubeMoon's integration tests run:
// the blank imports keep them (and every module they need) in go.mod and go.sum
// through `go mod tidy`. The tools build tag keeps this file out of every build;
// build.sh builds the two main packages by import path.
package testenv

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
