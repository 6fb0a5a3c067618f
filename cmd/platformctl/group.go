package main

import (
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

func newGroupCmd(g *globalOptions) *cobra.Command {
	return parentCmd("group", "Consumer groups: named durable subscriptions with their own position",
		newGroupCreateCmd(g), newGroupResetCmd(g))
}

func newGroupCreateCmd(g *globalOptions) *cobra.Command {
	var spec platform.GroupSpec
	var opts catalog.ApplyOptions
	cmd := &cobra.Command{
		Use:   "create NAME --topic TOPIC",
		Short: "Create a consumer group on a topic (one durable position per partition)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[0]
			if err := spec.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return g.apply(cmd, control.SubjGroupApply, control.ApplyGroupRequest{Spec: spec, Options: opts}, opts.DryRun)
		},
	}
	cmd.Flags().StringVar(&spec.Topic, "topic", "", "topic the group reads")
	addApplyFlags(cmd, &opts)
	return cmd
}
