// etcd, the control plane's store, as its own release builds it (go.etcd.io/etcd/v3's main calls the same).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
