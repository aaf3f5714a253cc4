// Command swml-rdma is the command-line face of swml-rdma: benchmarks, the
// software switch, the controller, workers and device discovery.
package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// version is set at link time (-ldflags "-X main.version=…").
var version = "dev"

// commands are the command groups, each built in its own file, in the
// order the help lists them.
func commands() []*cli.Command {
	return []*cli.Command{
		benchCommand(),
		controllerCommand(),
		devicesCommand(),
		labCommand(),
		switchCommand(),
		workerCommand(),
		writeBWCommand(),
	}
}

func newApp() *cli.App {
	cmds := commands()
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = usageError
		}
		checkRequiredInAction(c)
	}
	return &cli.App{
		Name:    "swml-rdma",
		Usage:   "SwitchML-style in-network aggregation over RoCEv2",
		Version: version,
		Description: "Workers quantize gradients to int32 and write them as RoCEv2 UC RDMA WRITEs to a\n" +
			"switch that adds them slot by slot and writes the sums back to every worker.\n" +
			"Everything runs on loopback with the userspace NIC; see README.md.",
		Commands:             cmds,
		OnUsageError:         usageError,
		EnableBashCompletion: true,
		ExitErrHandler: func(c *cli.Context, err error) {
			if err == nil {
				return
			}
			if ec, ok := err.(cli.ExitCoder); ok {
				if msg := ec.Error(); msg != "" {
					fmt.Fprintln(c.App.ErrWriter, "swml-rdma:", msg)
				}
				return
			}
		},
	}
}

func main() {
	app := newApp()
	if err := app.Run(os.Args); err != nil {
		if ec, ok := err.(cli.ExitCoder); ok {
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "swml-rdma:", err)
		os.Exit(1)
	}
}

// exitUsage is the exit status of every error in the command line (a flag
// that does not parse, a value out of range), as for most Unix tools.
const exitUsage = 2

// flagName matches the flag package's spelling of a flag in its errors
// ("-iters"), which this CLI writes "--iters".
var flagName = regexp.MustCompile(`(^|[ :])-([a-z][a-z0-9-]*)`)

// envFlagName matches urfave/cli's spelling of a flag in the error for an
// environment variable that does not parse ("for flag iters").
var envFlagName = regexp.MustCompile(`for flag ([a-z][a-z0-9-]*)`)

// strconvTail matches the strconv error urfave/cli appends to an
// environment variable that does not parse (`: strconv.ParseInt: parsing
// "abc": invalid syntax`): the rest of the message already says it.
var strconvTail = regexp.MustCompile(`: strconv\.Parse\w+: parsing "(?:[^"\\]|\\.)*": [a-z ]+`)

// usageError turns a flag that does not parse into one line naming the flag,
// the value and where to look, with exit status 2, instead of the help text
// and exit status 1. It rewrites the texts of the flag package and
// urfave/cli (TestUsageErrorTexts pins each form, so that an upgrade that
// changes them fails a test).
func usageError(c *cli.Context, err error, isSubcommand bool) error {
	msg := flagName.ReplaceAllString(err.Error(), "$1--$2")
	msg = strings.Replace(msg, "for flag --", "for --", 1)
	msg = envFlagName.ReplaceAllString(msg, "for --$1")
	msg = strconvTail.ReplaceAllString(msg, "")
	cmd := c.App.Name
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != cmd {
		cmd += " " + c.Command.Name
		if m := undefinedFlag.FindStringSubmatch(msg); m != nil {
			if near := nearFlags(c.Command.Flags, m[1]); len(near) > 0 {
				msg += " (did you mean --" + strings.Join(near, ", --") + "?)"
			}
		}
	}
	return cli.Exit(fmt.Sprintf("%s; `%s --help` lists the flags", msg, cmd), exitUsage)
}

// undefinedFlag matches the flag package's error for a flag the command
// does not have, once usageError has spelled it --name.
var undefinedFlag = regexp.MustCompile(`^flag provided but not defined: --([a-z][a-z0-9-]*)$`)

// nearFlags are the flags whose name starts with name, or is the start
// of it, as one word: a command's spelling of what another command
// calls otherwise (`switch --controller` for `switch --controller-addr`,
// `worker --controller-addr` for `worker --controller`).
func nearFlags(flags []cli.Flag, name string) []string {
	var near []string
	for _, f := range flags {
		n := f.Names()[0]
		if strings.HasPrefix(n, name+"-") || strings.HasPrefix(name, n+"-") {
			near = append(near, n)
		}
	}
	return near
}

// checkRequiredInAction moves the check of cmd's required flags into its
// action: urfave/cli's own check prints the whole help text and exits 1; this
// one prints one line naming the missing flags, with exit status 2.
func checkRequiredInAction(cmd *cli.Command) {
	var required []string
	for _, f := range cmd.Flags {
		var req *bool
		switch f := f.(type) {
		case *cli.StringFlag:
			req = &f.Required
		case *cli.StringSliceFlag:
			req = &f.Required
		case *cli.IntFlag:
			req = &f.Required
		case *cli.UintFlag:
			req = &f.Required
		case *cli.Uint64Flag:
			req = &f.Required
		case *cli.Float64Flag:
			req = &f.Required
		case *cli.DurationFlag:
			req = &f.Required
		case *cli.BoolFlag:
			req = &f.Required
		}
		if req != nil && *req {
			*req = false
			required = append(required, f.Names()[0])
		}
	}
	if len(required) == 0 || cmd.Action == nil {
		return
	}
	action := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		var missing []string
		for _, name := range required {
			if !c.IsSet(name) {
				missing = append(missing, "--"+name)
			}
		}
		if len(missing) > 0 {
			return cli.Exit(fmt.Sprintf("%s %s needs %s; `%s %s --help` says what each is", c.App.Name, cmd.Name, strings.Join(missing, ", "), c.App.Name, cmd.Name), exitUsage)
		}
		return action(c)
	}
}
