// Package cli implements magosctl, the Magos Fleet command line: registered clusters and their
// health, where a Rollout stands across clusters, and the everyday actions (retry, approve,
// pause, resume). It is also installed as the kubectl plugin `kubectl magos`.
//
// Commands talk to the cluster of the current kubeconfig context, like kubectl: the hub for
// clusters and rollouts, the spoke that holds a Workspace for retry and approve.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/magosfleet/magos/hub/decider"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/version"
)

// Options are the settings shared by every command.
type Options struct {
	// Config holds the kubectl-style flags (--kubeconfig, --context, -n, ...).
	Config *genericclioptions.ConfigFlags
	// Print holds -o/--output and its templates (cli-runtime's PrintFlags, as in kubectl):
	// json, yaml, name, jsonpath, go-template and their -file forms; "" or wide print the
	// command's table (wide with more columns).
	Print *genericclioptions.PrintFlags
	// Out and ErrOut are where commands write.
	Out, ErrOut io.Writer
	// Now is the clock (tests set it).
	Now func() time.Time
	// NewClient builds the client (tests may replace it); nil uses Config.
	NewClient func() (client.Client, error)
}

// NewCommand returns the root magosctl command.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	o := &Options{Config: genericclioptions.NewConfigFlags(true), Out: out, ErrOut: errOut, Now: time.Now,
		Print: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme.New())}
	root := &cobra.Command{
		Use:           "magosctl",
		Short:         "Operate a Magos Fleet: clusters, rollouts, retries and approvals",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get(),
	}
	o.Config.AddFlags(root.PersistentFlags())
	// PrintFlags adds its flags to one command; every command shares them here.
	printing := &cobra.Command{}
	o.Print.AddFlags(printing)
	root.PersistentFlags().AddFlagSet(printing.Flags())
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		// jsonpath=TEMPLATE and go-template=TEMPLATE carry their template, as in kubectl.
		format, _, _ := strings.Cut(o.output(), "=")
		if format == "" || format == "wide" || slices.Contains(o.Print.AllowedFormats(), format) {
			return nil
		}
		return fmt.Errorf("--output %q: want one of %s, or wide (default: a table)", o.output(), strings.Join(o.Print.AllowedFormats(), ", "))
	}
	root.AddCommand(
		newClustersCommand(o),
		newRolloutCommand(o),
		newRetryCommand(o),
		newApproveCommand(o),
		newRunsCommand(o),
		newPlanCommand(o),
		newLogsCommand(o),
		newAgentKubeconfigCommand(o),
		newVersionCommand(o),
	)
	return root
}

// Client returns a client for the current context.
func (o *Options) Client() (client.Client, error) {
	if o.NewClient != nil {
		return o.NewClient()
	}
	cfg, err := o.Config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}

// clientInNamespace is Client and Namespace together: most commands need both.
func (o *Options) clientInNamespace() (client.Client, string, error) {
	c, err := o.Client()
	if err != nil {
		return nil, "", err
	}
	ns, err := o.Namespace()
	return c, ns, err
}

// whoAmI returns the user name the API server knows the caller by (decider.WhoAmI).
func whoAmI(ctx context.Context, c client.Client) (string, error) { return decider.WhoAmI(ctx, c) }

// Namespace returns the namespace of -n or of the current context.
func (o *Options) Namespace() (string, error) {
	ns, _, err := o.Config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("resolving the namespace: %w", err)
	}
	return ns, nil
}

// print writes obj as YAML or JSON per --output, and reports whether it did.
// output is the -o format.
func (o *Options) output() string {
	if o.Print == nil || o.Print.OutputFormat == nil {
		return ""
	}
	return *o.Print.OutputFormat
}

// wide reports whether -o wide asks for the table with more columns.
func (o *Options) wide() bool { return o.output() == "wide" }

// print prints obj in the -o format and reports whether it did; with no format (or wide) it
// leaves the table to the caller. An API object goes through cli-runtime's printers with its
// kind and version set; other data (run records, a run's output) is printed as the JSON or
// YAML of its fields, or run through the JSONPath or template as that JSON, and -o name is
// refused for it unless names is given.
func (o *Options) print(obj any, names ...string) (bool, error) {
	format := o.output()
	if format == "" || format == "wide" {
		return false, nil
	}
	if ro, ok := obj.(runtime.Object); ok {
		p, err := o.Print.ToPrinter()
		if err != nil {
			return true, err
		}
		if format != "name" || !meta.IsListType(ro) {
			return true, p.PrintObj(ro, o.Out)
		}
		// The name printer takes one object at a time, as kubectl gives it.
		items, err := meta.ExtractList(ro)
		if err != nil {
			return true, err
		}
		for _, item := range items {
			if err := p.PrintObj(item, o.Out); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	switch format {
	case "json":
		b, err := json.MarshalIndent(obj, "", "    ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintln(o.Out, string(b))
		return true, err
	case "yaml":
		b, err := yaml.Marshal(obj)
		if err != nil {
			return true, err
		}
		_, err = o.Out.Write(b)
		return true, err
	case "name":
		if names == nil {
			return true, errors.New("--output name: this command prints no named objects")
		}
		for _, n := range names {
			if _, err := fmt.Fprintln(o.Out, n); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	// JSONPath and templates read the data as its JSON.
	raw, err := json.Marshal(obj)
	if err != nil {
		return true, err
	}
	var content any
	if err := json.Unmarshal(raw, &content); err != nil {
		return true, err
	}
	m, ok := content.(map[string]any)
	if !ok {
		m = map[string]any{"items": content}
	}
	p, err := o.Print.TemplatePrinterFlags.ToPrinter(format)
	if err != nil {
		return true, err
	}
	return true, p.PrintObj(&unstructured.Unstructured{Object: m}, o.Out)
}

func contextFor(cmd *cobra.Command) context.Context {
	if cmd.Context() != nil {
		return cmd.Context()
	}
	return context.Background()
}
