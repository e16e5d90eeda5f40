module github.com/sandbox-mcp/sandbox-mcp

go 1.25.5

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mark3labs/mcp-go v1.2.1 // indirect
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
