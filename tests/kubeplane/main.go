// Command kubeplane is a multi-call binary for the test suite's real Kubernetes control plane.
//
// It runs as etcd, kube-apiserver, kube-controller-manager, kube-scheduler or kubelet, chosen by the
// basename of argv[0] (symlinks) or, when called as kubeplane, by the first argument. Only the
// chosen command is built: the apiserver and controller-manager commands install the one-shot
// process signal handler while they are constructed, so building two of them would panic.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as in the upstream mains

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = "usage: kubeplane etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet [flags]"

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if name == "kubeplane" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	os.Exit(run(name, args))
}

// run builds the command for one personality and runs it with args, returning the exit code.
func run(name string, args []string) int {
	var command *cobra.Command
	switch name {
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
		return 0
	case "kube-apiserver":
		command = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		command = controllermanager.NewControllerManagerCommand()
	case "kube-scheduler":
		command = scheduler.NewSchedulerCommand()
	case "kubelet":
		command = kubelet.NewKubeletCommand(context.Background())
	default:
		fmt.Fprintf(os.Stderr, "kubeplane: unknown personality %q\n%s\n", name, usage)
		return 2
	}
	command.SetArgs(args)
	return cli.Run(command)
}
