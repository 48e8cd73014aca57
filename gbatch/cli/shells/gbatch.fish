# fish completion for gbatch: its commands, their options, partitions, nodes and your
# own job ids. Printed by `gbatch completion fish` (@VERSION@) from gbatch's parsers.
# Load it from ~/.config/fish/config.fish:   gbatch completion fish | source
# or save it as ~/.config/fish/completions/gbatch.fish.

# __gbatch_ask WORDS...: what `gbatch WORDS` prints, or nothing at all: no daemon, a
# slow one (3 s) or an error leaves the candidates empty and the terminal untouched.
function __gbatch_ask
    set -l prog (commandline -opc)[1]
    if not string match -q -- '*/*' $prog; or not test -x "$prog"
        set prog gbatch
    end
    if command -q timeout
        timeout 3 $prog $argv </dev/null 2>/dev/null
    else
        $prog $argv </dev/null 2>/dev/null
    end
end

# __gbatch_words KIND: the candidates of a kind the daemon knows, each once. Pending
# array tasks (`12_[1-3]`) are left to their array's id.
function __gbatch_words
    switch $argv[1]
        case job
            set words (__gbatch_ask squeue --me -h -o '%A %i')
        case partition
            set words (__gbatch_ask sinfo -h -o '%R')
        case node
            set words (__gbatch_ask sinfo -h -N -o '%N')
    end
    string split ' ' -- $words | string match -v -e '[' | string match -v '' | awk '!seen[$0]++'
end

# __gbatch_values KIND: the candidates of KIND (as `gbatch completion` names kinds);
# KIND ending in `,`: a comma list, whose last item is completed after the others.
function __gbatch_values
    set -l kind $argv[1]
    set -l head ''
    if string match -q -- '*,' $kind
        set kind (string sub -e -1 -- $kind)
        set head (commandline -ct | string replace -r -- '^-[^=]*=' '' | string replace -r -- '[^,]*$' '')
    end
    set -l candidates
    switch $kind
        case 'choice:*'
            set candidates (string split ' ' -- (string replace 'choice:' '' -- $kind))
        case job partition node
            set candidates (__gbatch_words $kind)
        case user
            set candidates (__fish_complete_users | string replace -r '\t.*' '')
        case '*'
            return
    end
    printf '%s\n' $head$candidates
end

# __gbatch_line: the words before the cursor read as argparse would, one a line: the
# command (`-` before there is one); `value` while an option's value is being completed,
# `rest` from an argument that takes the rest of the line on (its words are then its
# own, options too), else `-`; then the command's arguments.
function __gbatch_line
    set -l command -
    set -l args
    set -l option ''
    set -l state -
    for word in (commandline -opc)[2..-1]
        if test -n "$option"
            set option ''
            continue
        end
        if test $state != rest; and string match -q -- '-?*' $word
            if test "$word" = --
                set state rest
            else if not string match -q -- '*=*' $word
                set option (__gbatch_value $command $word)
            end
            continue
        end
        if test $command = -
            set command $word
            continue
        end
        set -a args $word
        # From an argument that takes the rest of the line on (sbatch's script
        # arguments after the script, srun's command), options are its own.
        for position in (math (count $args) - 1) (count $args)
            string match -q 'rest:*' -- (__gbatch_argument $command $position)
            and set state rest
        end
    end
    test -n "$option"; and set state value
    printf '%s\n' $command $state $args
end

function __gbatch_needs_command
    set -l line (__gbatch_line)
    test $line[1] = -
end

# __gbatch_command_is NAME: the command is NAME, and its options are still its own.
function __gbatch_command_is
    set -l line (__gbatch_line)
    test $line[1] = $argv[1]; and test $line[2] != rest
end

# __gbatch_argument_kind: what the word being completed is as an argument of the
# command (nothing while it is an option or an option's value).
function __gbatch_argument_kind
    set -l line (__gbatch_line)
    set -l command $line[1]
    set -l state $line[2]
    set -l args $line[3..-1]
    test $command != -; and test $state != value; or return
    if test $state != rest; and string match -q -- '-*' (commandline -ct)
        return
    end
    set -l kind (string replace 'rest:' '' -- (__gbatch_argument $command (count $args)))
    if test "$kind" = scontrol
        # scontrol's: `show job|node|partition [NAME]`, job ids after hold and the like.
        set kind ''
        switch "$args[1]"
            case show
                if test (count $args) = 1
                    set kind 'choice:job node partition'
                else if test (count $args) = 2; and contains -- "$args[2]" job node partition
                    set kind $args[2]
                end
            case hold release requeue
                set kind job,
        end
    end
    echo $kind
end

function __gbatch_argument_values
    set -l kind (__gbatch_argument_kind)
    test -n "$kind"; and __gbatch_values $kind
end

function __gbatch_argument_is_file
    contains -- (__gbatch_argument_kind) file file,
end

@TABLES@
