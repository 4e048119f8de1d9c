//go:build tools

// Package testenv only pins the programs KubeMoon's real test environment runs:
// the blank imports keep them (and every module they need) in go.mod and go.sum
// through `go mod tidy`. The tools build tag keeps this file out of every build;
// kubemoon-testenv builds the three main packages by import path.
package testenv

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
