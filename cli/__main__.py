from clustertop.cli import main

raise SystemExit(main())
