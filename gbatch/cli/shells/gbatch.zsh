#compdef gbatch
# zsh completion for gbatch: its commands, their options, partitions, nodes and your
# own job ids. Printed by `gbatch completion zsh` (@VERSION@) from gbatch's parsers.
# Load it from ~/.zshrc, after compinit:   source <(gbatch completion zsh)
# or save it as _gbatch in a directory on $fpath.

@TABLES@

# _gbatch_ask WORDS...: what `gbatch WORDS` prints, or nothing at all: no daemon, a slow
# one (3 s) or an error leaves the candidates empty and the terminal untouched.
_gbatch_ask() {
    local prog=${_gbatch_prog:-gbatch}
    [[ $prog == */* && -x $prog ]] || prog=gbatch
    if (( $+commands[timeout] )); then
        timeout 3 $prog "$@" </dev/null 2>/dev/null
    else
        $prog "$@" </dev/null 2>/dev/null
    fi
}

# _gbatch_words KIND: reply, the candidates of a kind the daemon knows, each once.
# Pending array tasks (`12_[1-3]`) are left to their array's id.
_gbatch_words() {
    local out
    case $1 in
    job) out=$(_gbatch_ask squeue --me -h -o '%A %i') ;;
    partition) out=$(_gbatch_ask sinfo -h -o '%R') ;;
    node) out=$(_gbatch_ask sinfo -h -N -o '%N') ;;
    esac
    reply=(${(u)${=out}})
    reply=(${reply:#*\[*})
}

_gbatch_jobs() {
    local -a reply
    _gbatch_words job
    _wanted jobs expl 'job id' compadd "$@" -a reply
}

_gbatch_partitions() {
    local -a reply
    _gbatch_words partition
    _wanted partitions expl partition compadd "$@" -a reply
}

_gbatch_nodes() {
    local -a reply
    _gbatch_words node
    _wanted nodes expl node compadd "$@" -a reply
}

# scontrol's arguments after its action: `show job|node|partition [NAME]`, job ids
# after hold, release and requeue.
_gbatch_scontrol() {
    local -a args
    args=(${words[2,CURRENT-1]:#-*})
    case $args[1] in
    show)
        if (( $#args == 1 )); then
            _wanted subjects expl 'what to show' compadd job node partition
        elif (( $#args == 2 )); then
            case $args[2] in
            job) _gbatch_jobs ;;
            node) _gbatch_nodes ;;
            partition) _gbatch_partitions ;;
            esac
        fi
        ;;
    hold | release | requeue) _sequence _gbatch_jobs ;;
    esac
}

_gbatch() {
    local curcontext=$curcontext state state_descr line ret=1
    local -A opt_args
    local _gbatch_prog=$words[1]
    _arguments -C : $_gbatch_options '1: :->command' '*:: :->argument' && ret=0
    case $state in
    command)
        _describe -t commands 'gbatch command' _gbatch_commands && ret=0
        ;;
    argument)
        curcontext=${curcontext%:*:*}:gbatch-$words[1]:
        if (( $+functions[_gbatch_command_${words[1]}] )); then
            _gbatch_command_${words[1]} && ret=0
        fi
        ;;
    esac
    return ret
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _gbatch "$@"
else
    compdef _gbatch gbatch
fi
