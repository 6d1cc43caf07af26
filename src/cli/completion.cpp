// `etnp completion bash|zsh`: shell completion scripts made from the commands' usage texts, so that the
// options they offer are those `etnp CMD --help` lists.
#include <algorithm>
#include <cctype>
#include <set>

#include "cli/cli.h"

namespace etnp::cli {
namespace {

const std::set<std::string> kFileOptions = {"--data", "--input", "--expect", "--tokenizer"};
const std::set<std::string> kDirOptions = {"--output-dir", "--batch"};
const std::set<std::string> kRepeatable = {"--data", "--limit", "--input", "--expect", "--shape", "--stop"};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Every "--name" in `line`.
void flags_in(const std::string& line, std::vector<std::string>* out) {
  for (size_t p = line.find("--"); p != std::string::npos; p = line.find("--", p + 2)) {
    size_t e = p + 2;
    if (e >= line.size() || !std::islower(static_cast<unsigned char>(line[e]))) continue;
    while (e < line.size() && (std::islower(static_cast<unsigned char>(line[e])) ||
                               std::isdigit(static_cast<unsigned char>(line[e])) || line[e] == '-')) {
      ++e;
    }
    const std::string flag = line.substr(p, e - p);
    if (std::find(out->begin(), out->end(), flag) == out->end()) out->push_back(flag);
  }
}

bool takes_value(const std::vector<std::string>& value_options, const std::string& flag) {
  return std::find(value_options.begin(), value_options.end(), flag) != value_options.end();
}

// The first words of a flag's description in the usage text (for zsh), or "".
std::string description(const std::string& usage, const std::string& flag) {
  for (const auto& line : lines_of(usage)) {
    if (line.rfind("  " + flag + " ", 0) != 0) continue;
    size_t p = 2 + flag.size();
    // Skip the value's name ("--data F.ptd  external data..."): the description follows two spaces.
    const size_t gap = line.find("  ", p);
    if (gap == std::string::npos) return "";
    p = line.find_first_not_of(' ', gap);
    if (p == std::string::npos) return "";
    const std::string text = line.substr(p);
    // The line's first clause (up to a ": " outside parentheses): the rest may go on on the next line.
    int depth = 0;
    for (size_t i = 0; i + 1 < text.size(); ++i) {
      depth += text[i] == '(' ? 1 : text[i] == ')' ? -1 : 0;
      if (depth == 0 && text[i] == ':' && text[i + 1] == ' ') return text.substr(0, i);
    }
    return text;
  }
  return "";
}

std::string zsh_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '\'') r += "'\\''";
    else if (c == '[' || c == ']' || c == ':' || c == '\\') r += std::string("\\") + c;
    else r += c;
  }
  return r;
}

bool takes_file(const CommandText& c) { return std::string(c.name) != "version" && std::string(c.name) != "completion"; }

std::string bash_script(const std::vector<CommandText>& commands, const std::vector<std::string>& value_options) {
  std::string names;
  for (const auto& c : commands) names += (names.empty() ? "" : " ") + std::string(c.name);
  std::string s =
      "# bash completion for etnp, written by `etnp completion bash`.\n"
      "# Install: etnp completion bash > ~/.local/share/bash-completion/completions/etnp\n"
      "#      or: source <(etnp completion bash)   (in ~/.bashrc)\n"
      "_etnp() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
      "  local commands=\"" + names + "\"\n"
      "  COMPREPLY=()\n"
      "  if (( COMP_CWORD == 1 )); then\n"
      "    COMPREPLY=( $(compgen -W \"$commands help --help --version\" -- \"$cur\") )\n"
      "    return 0\n"
      "  fi\n"
      "  local cmd=${COMP_WORDS[1]} flags=\n"
      "  case $cmd in\n"
      "    help) (( COMP_CWORD == 2 )) && COMPREPLY=( $(compgen -W \"$commands\" -- \"$cur\") ); return 0 ;;\n"
      "    completion) (( COMP_CWORD == 2 )) && COMPREPLY=( $(compgen -W \"bash zsh\" -- \"$cur\") ); return 0 ;;\n";
  for (const auto& c : commands) {
    const auto flags = command_flags(c.usage);
    std::string list;
    for (const auto& f : flags) list += (list.empty() ? "" : " ") + f;
    s += "    " + std::string(c.name) + ") flags=\"" + list + "\" ;;\n";
  }
  s += "    *) return 0 ;;\n  esac\n  case $prev in\n";
  std::string files, dirs, others;
  for (const auto& o : value_options) {
    std::string& group = kFileOptions.count(o) ? files : kDirOptions.count(o) ? dirs : others;
    if (o != "--fill" && o != "--print") group += (group.empty() ? "" : "|") + o;
  }
  s += "    " + files + ") COMPREPLY=( $(compgen -f -- \"$cur\") ); return 0 ;;\n";
  s += "    " + dirs + ") COMPREPLY=( $(compgen -d -- \"$cur\") ); return 0 ;;\n";
  s += "    --fill) COMPREPLY=( $(compgen -W \"ones zeros random\" -- \"$cur\") ); return 0 ;;\n";
  s += "    --print) COMPREPLY=( $(compgen -W \"none summary all\" -- \"$cur\") ); return 0 ;;\n";
  s += "    " + others + ") return 0 ;;\n";
  s +=
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=( $(compgen -W \"$flags\" -- \"$cur\") )\n"
      "  elif [[ $cmd != version ]]; then\n"
      "    COMPREPLY=( $(compgen -f -- \"$cur\") )\n"
      "  fi\n"
      "  return 0\n"
      "}\n"
      "complete -o filenames -o bashdefault -F _etnp etnp\n";
  return s;
}

std::string zsh_script(const std::vector<CommandText>& commands, const std::vector<std::string>& value_options) {
  std::string s =
      "#compdef etnp\n"
      "# zsh completion for etnp, written by `etnp completion zsh`.\n"
      "# Install: etnp completion zsh > ~/.zfunc/_etnp   (with fpath+=(~/.zfunc) before compinit in ~/.zshrc)\n"
      "#      or: source <(etnp completion zsh)   (in ~/.zshrc, after compinit)\n"
      "_etnp() {\n"
      "  local -a commands\n"
      "  commands=(\n";
  for (const auto& c : commands) s += "    '" + std::string(c.name) + ":" + zsh_escape(c.summary) + "'\n";
  s +=
      "  )\n"
      "  if (( CURRENT == 2 )); then\n"
      "    _describe -t commands 'etnp command' commands\n"
      "    return\n"
      "  fi\n"
      "  local cmd=${words[2]}\n"
      "  shift words\n"
      "  (( CURRENT-- ))\n"
      "  case $cmd in\n"
      "    help) _describe -t commands 'etnp command' commands ;;\n"
      "    completion) _arguments '1:shell:(bash zsh)' ;;\n";
  for (const auto& c : commands) {
    if (std::string(c.name) == "completion") continue;
    s += "    " + std::string(c.name) + ")\n      _arguments -S \\\n";
    for (const auto& f : command_flags(c.usage)) {
      std::string text = f == "--help" ? "show the command's usage" : description(c.usage, f);
      for (const auto& other : commands) {  // an option the usage shows only in its synopsis: another's words
        if (text.empty()) text = description(other.usage, f);
      }
      const std::string desc = zsh_escape(text);
      std::string spec = (kRepeatable.count(f) ? "*" : "") + f;
      if (takes_value(value_options, f)) {
        std::string action = kFileOptions.count(f)  ? "file:_files"
                             : kDirOptions.count(f) ? "directory:_files -/"
                             : f == "--fill"        ? "fill:(ones zeros random)"
                             : f == "--print"       ? "print:(none summary all)"
                                                    : "value: ";
        spec += "=[" + desc + "]:" + action;
      } else {
        spec += "[" + desc + "]";
      }
      s += "        '" + spec + "' \\\n";
    }
    s += takes_file(c) ? "        '*:file:_files'\n" : "        \n";
    s += "      ;;\n";
  }
  s +=
      "  esac\n"
      "}\n"
      "if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then\n"
      "  _etnp \"$@\"\n"
      "else\n"
      "  compdef _etnp etnp\n"
      "fi\n";
  return s;
}

}  // namespace

std::vector<std::string> command_flags(const std::string& usage) {
  std::vector<std::string> flags;
  const auto lines = lines_of(usage);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const bool synopsis = i == 0 || (line.rfind("    ", 0) == 0 && line.find_first_not_of(' ') != std::string::npos &&
                                     line[line.find_first_not_of(' ')] == '[' && i < 4);
    if (synopsis) {
      flags_in(line, &flags);
    } else if (line.rfind("  --", 0) == 0) {
      flags_in(line.substr(0, line.find(' ', 2)), &flags);
    }
  }
  flags.push_back("--help");
  return flags;
}

std::string completion_script(const std::string& shell, const std::vector<CommandText>& commands,
                              const std::vector<std::string>& value_options) {
  return shell == "zsh" ? zsh_script(commands, value_options) : bash_script(commands, value_options);
}

}  // namespace etnp::cli
