package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/openatf/atf/shared/client"
)

// atf completion bash|zsh|fish prints a completion script of the shell: the commands, each
// command's flags, and the lambdas of the API at $ATF_ENDPOINT where a command takes one, which
// the script asks `atf completion lambdas` for as it completes.

const completionUsage = `  atf completion bash|zsh|fish
      print the shell's completion script: source <(atf completion bash) in ~/.bashrc, or
      source <(atf completion zsh) in ~/.zshrc, or atf completion fish | source in config.fish
`

// lambdaNamesTimeout bounds the call a completion makes for the lambdas' names.
const lambdaNamesTimeout = 2 * time.Second

func completion(args []string, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("completion takes one of bash, zsh, fish")
	}
	cmds := completionCommands()
	switch args[0] {
	case "bash":
		return bashCompletion(out, cmds)
	case "zsh":
		return zshCompletion(out, cmds)
	case "fish":
		return fishCompletion(out, cmds)
	case "lambdas": // for the scripts: the lambdas' names, one a line, or nothing
		ctx, cancel := context.WithTimeout(context.Background(), lambdaNamesTimeout)
		defer cancel()
		c := &client.Client{Endpoint: strings.TrimRight(envOr("ATF_ENDPOINT", "http://127.0.0.1:8080"), "/"), Token: envOr("ATF_TOKEN", "")}
		var err error
		if c.SigV4, err = sigV4Config(ctx, c.Endpoint, ""); err != nil {
			return nil
		}
		ls, err := c.Lambdas(ctx)
		if err != nil {
			return nil
		}
		for _, l := range ls {
			fmt.Fprintln(out, l.Name)
		}
		return nil
	}
	return fmt.Errorf("completion: unknown shell %q: bash, zsh or fish", args[0])
}

// completedCommand is a command as the scripts complete it.
type completedCommand struct {
	name       string
	flags      []string // without the dashes
	takeLambda bool     // its first argument is a lambda
}

// flagInHelp finds a flag in what a flag.FlagSet prints for -h.
var flagInHelp = regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`)

// flagsOf returns the flags of a command that parses its arguments with a flag.FlagSet, from
// what it prints for -h (on stderr, read through a pipe meanwhile), so that they never drift
// from the command's own.
func flagsOf(cmd func(args []string) error) []string {
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	defer r.Close()
	saved := os.Stderr
	os.Stderr = w
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	_ = cmd([]string{"-h"}) // flag.ErrHelp, having printed the flags
	os.Stderr = saved
	w.Close()
	var flags []string
	for _, m := range flagInHelp.FindAllStringSubmatch(string(<-done), -1) {
		flags = append(flags, m[1])
	}
	return flags
}

// completionCommands lists every command with its flags.
func completionCommands() []completedCommand {
	var cmds []completedCommand
	global := []string{"endpoint", "token", "region", "json"}
	for name, cl := range clientCommands {
		cmds = append(cmds, completedCommand{name, slices.Concat(cl.flags, global), cl.args > 0 || name == "schedule"})
	}
	for name, st := range streamCommands {
		cmds = append(cmds, completedCommand{name, slices.Concat(st.flags, global), st.args > 0})
	}
	cmds = append(cmds,
		completedCommand{name: "dev", flags: flagsOf(dev)},
		completedCommand{name: "create", flags: flagsOf(func(args []string) error { return create(args, io.Discard) })},
		completedCommand{name: "new", flags: flagsOf(func(args []string) error { return newCommand(args, io.Discard) })},
		completedCommand{name: "dashboard", flags: flagsOf(func(args []string) error { return dashboardCommand(args, io.Discard) })},
		completedCommand{name: "version", flags: []string{"json"}},
		completedCommand{name: "completion"}, completedCommand{name: "help"})
	slices.SortFunc(cmds, func(a, b completedCommand) int { return strings.Compare(a.name, b.name) })
	return cmds
}

func names(cmds []completedCommand, keep func(completedCommand) bool) string {
	var out []string
	for _, c := range cmds {
		if keep(c) {
			out = append(out, c.name)
		}
	}
	return strings.Join(out, " ")
}

func dashed(flags []string) string {
	out := make([]string, len(flags))
	for i, f := range flags {
		out[i] = "--" + f
	}
	return strings.Join(out, " ")
}

func all(completedCommand) bool           { return true }
func takesLambda(c completedCommand) bool { return c.takeLambda }

func bashCompletion(w io.Writer, cmds []completedCommand) error {
	var cases strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&cases, "    %s) flags=%q ;;\n", c.name, dashed(c.flags))
	}
	_, err := fmt.Fprintf(w, `# bash completion of atf: source <(atf completion bash)
_atf() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} flags=
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W %q -- "$cur"))
    return
  fi
  case "$cmd" in
%s  esac
  case "$cur" in
    -*) COMPREPLY=($(compgen -W "$flags" -- "$cur")); return ;;
  esac
  if [ "$COMP_CWORD" -eq 2 ]; then
    case " %s " in
      *" $cmd "*) COMPREPLY=($(compgen -W "$(atf completion lambdas 2>/dev/null)" -- "$cur")); return ;;
    esac
    if [ "$cmd" = completion ]; then COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")); return; fi
    if [ "$cmd" = new ]; then COMPREPLY=($(compgen -W "lambda" -- "$cur")); return; fi
  fi
}
complete -o default -F _atf atf
`, names(cmds, all), cases.String(), names(cmds, takesLambda))
	return err
}

func zshCompletion(w io.Writer, cmds []completedCommand) error {
	var cases strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&cases, "    (%s) compadd -- %s ;;\n", c.name, dashed(c.flags))
	}
	_, err := fmt.Fprintf(w, `#compdef atf
# zsh completion of atf: source <(atf completion zsh), or save as _atf on $fpath
_atf() {
  local cmd=${words[2]}
  if (( CURRENT == 2 )); then
    compadd -- %s
    return
  fi
  if [[ ${words[CURRENT]} == -* ]]; then
    case $cmd in
%s    esac
    return
  fi
  if (( CURRENT == 3 )); then
    case $cmd in
      (%s) compadd -- ${(f)"$(atf completion lambdas 2>/dev/null)"}; return ;;
      (completion) compadd -- bash zsh fish; return ;;
      (new) compadd -- lambda; return ;;
    esac
  fi
  _files
}
if [ "$funcstack[1]" = "_atf" ]; then
  _atf "$@"
else
  compdef _atf atf
fi
`, names(cmds, all), cases.String(), strings.ReplaceAll(names(cmds, takesLambda), " ", "|"))
	return err
}

func fishCompletion(w io.Writer, cmds []completedCommand) error {
	var b strings.Builder
	b.WriteString("# fish completion of atf: atf completion fish | source\n")
	fmt.Fprintf(&b, "complete -c atf -n __fish_use_subcommand -f -a %q\n", names(cmds, all))
	for _, c := range cmds {
		for _, f := range c.flags {
			fmt.Fprintf(&b, "complete -c atf -n '__fish_seen_subcommand_from %s' -l %s\n", c.name, f)
		}
	}
	fmt.Fprintf(&b, "complete -c atf -n '__fish_seen_subcommand_from %s' -f -a '(atf completion lambdas 2>/dev/null)'\n", names(cmds, takesLambda))
	b.WriteString("complete -c atf -n '__fish_seen_subcommand_from completion' -f -a 'bash zsh fish'\n")
	b.WriteString("complete -c atf -n '__fish_seen_subcommand_from new' -f -a 'lambda'\n")
	_, err := io.WriteString(w, b.String())
	return err
}
