# bash completion for gbatch: its commands, their options, partitions, nodes and your
# own job ids. Printed by `gbatch completion bash` (@VERSION@) from gbatch's parsers.
# Load it from ~/.bashrc:   source <(gbatch completion bash)
# shellcheck shell=bash disable=SC2207

@TABLES@

# _gbatch_ask WORDS...: what `gbatch WORDS` prints, or nothing at all: no daemon, a slow
# one (3 s) or an error leaves the candidates empty and the terminal untouched.
_gbatch_ask() {
    local prog=${COMP_WORDS[0]}
    [[ $prog == */* && -x $prog ]] || prog=gbatch
    if command -v timeout >/dev/null 2>&1; then
        timeout 3 "$prog" "$@" </dev/null 2>/dev/null
    else
        "$prog" "$@" </dev/null 2>/dev/null
    fi
}

# _gbatch_words KIND: the candidates of a kind the daemon knows, one per line, each
# once. Pending array tasks (`12_[1-3]`) are left to their array's id.
_gbatch_words() {
    local line word
    local -a items
    local -A seen=()
    case $1 in
    job) line=$(_gbatch_ask squeue --me -h -o '%A %i') ;;
    partition) line=$(_gbatch_ask sinfo -h -o '%R') ;;
    node) line=$(_gbatch_ask sinfo -h -N -o '%N') ;;
    esac
    while read -r -a items; do
        for word in "${items[@]}"; do
            [[ $word == *\[* || -n ${seen[$word]-} ]] && continue
            seen[$word]=1
            printf '%s\n' "$word"
        done
    done <<<"$line"
}

# _gbatch_scontrol ARG...: the kind of scontrol's next argument after ARG...:
# `show job|node|partition [NAME]`, job ids after hold, release and requeue.
_gbatch_scontrol() {
    REPLY=
    case $1 in
    show)
        if (($# == 1)); then
            REPLY='choice:job node partition'
        elif (($# == 2)); then
            case $2 in job | node | partition) REPLY=$2 ;; esac
        fi
        ;;
    hold | release | requeue) REPLY=job, ;;
    esac
}

# _gbatch_values KIND CUR PREFIX: COMPREPLY, the values of KIND that start with CUR, each
# after PREFIX. KIND ending in `,`: a comma list, whose last item is completed.
_gbatch_values() {
    local kind=$1 cur=$2 prefix=$3 words
    if [[ $kind == *, ]]; then
        kind=${kind%,}
        if [[ $cur == *,* ]]; then
            prefix+=${cur%,*},
            cur=${cur##*,}
        fi
    fi
    case $kind in
    choice:*) words=${kind#choice:} && words=${words// /$'\n'} ;;
    job | partition | node) words=$(_gbatch_words "$kind") ;;
    user) words=$(compgen -u) ;;
    file | dir)
        compopt -o filenames 2>/dev/null
        if [[ $kind == dir ]]; then
            COMPREPLY=($(compgen -d -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return
        ;;
    *) return ;;
    esac
    local IFS=$'\n'
    COMPREPLY=($(compgen -P "$prefix" -W "$words" -- "$cur"))
}

_gbatch() {
    local cur=${COMP_WORDS[COMP_CWORD]} word command='' option='' prefix='' rest=''
    local -a args=()
    local i j
    COMPREPLY=()
    # Read the words before the cursor as argparse would: gbatch's own options, the
    # command, its options (and the values of those that take one), its arguments.
    # Bash splits `--partition=gpu` into `--partition`, `=`, `gpu`.
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [[ -n $option ]]; then
            [[ $word == = ]] || option=''
            continue
        fi
        if [[ -z $rest && $word == -?* ]]; then
            if [[ $word == -- ]]; then
                rest=1
            elif [[ $word != *=* ]]; then
                _gbatch_value "$command" "$word"
                [[ -n $REPLY ]] && option=$word
            fi
            continue
        fi
        if [[ -z $command ]]; then
            command=$word
            continue
        fi
        args+=("$word")
        # From an argument that takes the rest of the line on (sbatch's script
        # arguments after the script, srun's command), options are its own.
        for ((j = ${#args[@]} - 1; j <= ${#args[@]}; j++)); do
            _gbatch_argument "$command" "$j"
            [[ $REPLY == rest:* ]] && rest=1
        done
    done
    if [[ -z $option && -z $rest && $cur == --?*=* ]]; then # `--partition=gp`, one word
        option=${cur%%=*}
        prefix=$option=
        cur=${cur#*=}
    elif [[ -n $option && $cur == = ]]; then # `--partition=`: bash made `=` the word
        prefix='='
        cur=''
    fi
    if [[ -n $option ]]; then
        _gbatch_value "$command" "$option"
    elif [[ -z $rest && $cur == -* ]]; then
        _gbatch_options "$command"
        COMPREPLY=($(compgen -W "$REPLY" -- "$cur"))
        return
    elif [[ -z $command ]]; then
        COMPREPLY=($(compgen -W "$_gbatch_commands" -- "$cur"))
        return
    else
        _gbatch_argument "$command" "${#args[@]}"
        REPLY=${REPLY#rest:}
        [[ $REPLY == scontrol ]] && _gbatch_scontrol "${args[@]}"
    fi
    _gbatch_values "$REPLY" "$cur" "$prefix"
}

complete -F _gbatch gbatch
