"""The report page's HTML skeleton and style (filled in by :mod:`topk.report.page`)."""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font: 15px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       max-width: 1180px; margin: 2em auto; padding: 0 1.5em; }}
h1 {{ font-size: 1.6em; margin-bottom: .2em; }}
h2 {{ font-size: 1.25em; margin: 2.2em 0 .3em; padding-top: .6em; border-top: 1px solid #ccc; }}
h3 {{ font-size: 1.05em; margin: 1.4em 0 .3em; }}
h4 {{ font-size: .95em; margin: 1em 0 .3em; font-weight: 600; }}
p, li {{ max-width: 62em; }}
.meta {{ color: #555; font-size: .92em; }}
code {{ background: #f3f3f3; padding: 0 .25em; border-radius: 3px; font-size: .92em; }}
.scroll {{ overflow-x: auto; margin: .4em 0 1em; }}
.protocol p, .protocol li {{ overflow-wrap: anywhere; }}  /* a sweep's long overrides and paths wrap */
table {{ border-collapse: collapse; font-size: .85em; font-variant-numeric: tabular-nums; }}
th, td {{ border: 1px solid #ddd; padding: .25em .55em; text-align: left; vertical-align: top; }}
thead th, tbody th {{ background: #f6f6f6; }}
tbody tr:nth-child(even) td {{ background: #fafafa; }}
img {{ display: block; max-width: 100%; width: {image_width}px; margin: .6em 0 1em;
       border: 1px solid #eee; }}
.status {{ display: inline-block; padding: .05em .6em; border-radius: 1em; font-size: .8em;
           font-weight: 600; vertical-align: middle; white-space: nowrap; }}
.reproduced {{ background: #d8f0d8; color: #14521b; }}
.incomplete {{ background: #fbeec8; color: #6b4a00; }}
.differs {{ background: #f7d9d4; color: #7a1d10; }}
.deviates {{ background: #f3dcf0; color: #62175a; }}
.undecided, .ran {{ background: #e6f0e0; color: #3b5530; }}
.smoke {{ background: #e3e9f7; color: #23407a; }}
.none {{ background: #eee; color: #555; }}
.error {{ color: #a00; }}
tr.marked td {{ background: #fff6dd; }}
table.card td:nth-child(2) {{ min-width: 11em; max-width: 16em; overflow-wrap: anywhere; }}
table.card td:last-child {{ min-width: 26em; }}
details {{ margin: .5em 0 1em; }}
summary {{ cursor: pointer; color: #345; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""
