// Command vcluster is the vCluster syncer (`vcluster start`, `vcluster version`, ...) built
// from the pinned github.com/loft-sh/vcluster module. It is the module's own cmd/vcluster main:
// a wrapper module of ours is needed because the vCluster module's graph names a module the
// proxy refuses (see README.md).
package main

import (
	"github.com/loft-sh/vcluster/cmd/vcluster/cmd"

	// The same blank imports as the module's own cmd/vcluster main.
	_ "github.com/go-openapi/loads"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	_ "k8s.io/client-go/plugin/pkg/client/auth/gcp"
	_ "modernc.org/sqlite"
)

func main() {
	cmd.RunRoot()
}
